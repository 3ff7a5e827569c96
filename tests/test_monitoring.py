"""The monitoring files of deploy/: the Prometheus alerting rules pass ``promtool check rules`` and their
unit tests (``promtool test rules``); every expression of the rules and of the Grafana dashboard parses and
names only metrics a real server exports on ``/metrics``; and that server's own series, replayed through
the rules, fire the alerts its traffic should fire and no other.

promtool is Debian's ``prometheus`` package (scripts/test installs it): missing, these tests skip on a
developer machine and fail in CI.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from cache_server.settings import Settings
from tests.support.api import member, post_bulk, put, put_ok
from tests.support.metrics import metric_samples
from tests.support.monitoring import (
    DASHBOARD,
    RULE_TESTS,
    RULES,
    Expression,
    as_recording_rules,
    dashboard_expressions,
    exported_names,
    firing_alerts_test,
    load_dashboard,
    load_rules,
    metric_names,
    rule_expressions,
)
from tests.support.needs import require_binary
from tests.support.server import run_server

BUDGET_BYTES = 120
"""The storage budget of the scraped server: its 110 bytes stored are past 90% of it."""
MAX_ENTRY = {"XLA_CACHE_MAX_ENTRY_BYTES": "1000"}
RUN_METRICS = (
    "xla_cache_runs_total",
    "xla_cache_run_hits_total",
    "xla_cache_run_misses_total",
    "xla_cache_run_compile_seconds_total",
    "xla_cache_run_saved_seconds_total",
)
"""The run metrics of issue 27 (their names are shared by the branches that report runs)."""


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = require_binary("promtool", "promtool (Debian's prometheus package) is not installed")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real server's ``/metrics`` after a little traffic, with a storage budget set: an entry stored, read
    and asked for; uploads refused each way: a PUT (400, wrong digest), a member of a bulk upload (413, too
    large) and a whole bulk upload (415, gzip); 110 bytes stored."""
    data_dir = tmp_path_factory.mktemp("monitoring")
    with (
        run_server(data_dir, {"XLA_CACHE_MAX_TOTAL_BYTES": str(BUDGET_BYTES), **MAX_ENTRY}) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        put_ok(http, "mon-ns", "a", b"a" * 100)
        assert http.get("/v1/namespaces/mon-ns/entries/a").status_code == 200
        assert http.get("/v1/namespaces/mon-ns/entries/missing").status_code == 404
        assert put(http, "mon-ns", "b", b"b", digest="0" * 64).status_code == 400
        bulk = post_bulk(http, "mon-ns", [member("c", b"c" * 10), member("d", b"d" * 2000)])
        assert bulk.status_code == 200
        assert [result["status"] for result in bulk.json()["results"]] == [201, 413]
        gzipped = http.post(
            "/v1/namespaces/mon-ns/entries", content=b"x", headers={"Content-Encoding": "gzip"}
        )
        assert gzipped.status_code == 415
        response = http.get("/metrics")
        assert response.status_code == 200
        return response.text


@pytest.fixture(scope="module")
def exported(scrape: str) -> set[str]:
    """The metric names that server exports."""
    return exported_names(scrape)


def test_the_rules_pass_promtool_check() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rule_expressions())} rules found" in result.stdout


def test_the_rules_pass_their_unit_tests() -> None:
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_alerts_fire_on_a_real_servers_series(scrape: str, tmp_path: Path) -> None:
    """The scraped server's own series, its traffic repeated every minute for an hour: of the five entries
    offered a minute, one PUT is refused with 400, one bulk member with 413 and one bulk upload with 415,
    and 110 of 120 bytes are stored, so those alerts fire, matched on the labels the server writes (its
    route names); no other does (no 5xx, no runs)."""
    test = tmp_path / "real-series.test.yml"
    firing = [
        {"alertname": "XlaCacheUploadsRefused", "status": "400"},
        {"alertname": "XlaCacheUploadsRefused", "status": "413"},
        {"alertname": "XlaCacheUploadsRefused", "status": "415"},
        {"alertname": "XlaCacheStorageNearBudget"},
    ]
    test.write_text(firing_alerts_test(scrape, firing))
    result = promtool("test", "rules", str(test))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_matches_routes_as_the_rules_do() -> None:
    """The rules' route matchers are checked on a real server's labels (above); the dashboard uses them."""
    matcher = re.compile(r'route=~?"(?:[^"\\]|\\.)*"')
    in_rules = {found for expression in rule_expressions() for found in matcher.findall(expression.promql)}
    in_dashboard = {found for expr in dashboard_expressions() for found in matcher.findall(expr.promql)}
    assert in_dashboard
    assert in_dashboard <= in_rules


def test_each_alert_is_tested_firing_and_quiet() -> None:
    """Every alert of the rules has a unit test where it fires and one where it stays quiet."""
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    for expression in rule_expressions():
        mine = [case for case in cases if case["alertname"] == expression.where]
        assert any(case.get("exp_alerts") for case in mine), f"{expression.where} is never seen firing"
        assert any(not case.get("exp_alerts") for case in mine), f"{expression.where} is never seen quiet"


def test_each_alert_says_how_bad_and_where_to_look() -> None:
    dashboard_text = " ".join(str(panel.get("description", "")) for panel in load_dashboard()["panels"])
    for group in load_rules()["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
            assert rule["for"], rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]
            assert '"xla-cache" Grafana dashboard' in rule["annotations"]["description"], rule["alert"]
            assert f"Alert: {rule['alert']}" in dashboard_text, f"no dashboard panel shows {rule['alert']}"


def test_the_dashboard_expressions_parse(tmp_path: Path) -> None:
    """Each of the dashboard's expressions, its variables given values, parses as PromQL (promtool)."""
    expressions = dashboard_expressions()
    rules = tmp_path / "dashboard-rules.yml"
    rules.write_text(as_recording_rules(expressions))
    result = promtool("check", "rules", str(rules))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(expressions)} rules found" in result.stdout


def test_the_dashboard_has_a_datasource_and_a_framework_variable() -> None:
    dashboard = load_dashboard()
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["framework"]["query"]["query"] == "label_values(xla_cache_runs_total, framework)"
    panels = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    assert {panel["datasource"]["uid"] for panel in panels} == {"${datasource}"}
    run_panels = [p for p in panels if any("xla_cache_run" in t["expr"] for t in p["targets"])]
    assert run_panels
    assert all('framework=~"$framework"' in t["expr"] for p in run_panels for t in p["targets"])


def test_the_dashboard_panels_have_ids_and_fit_the_grid_without_overlap() -> None:
    panels = load_dashboard()["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(set(ids)) == len(ids)
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        place = panel["gridPos"]
        assert place["x"] >= 0 and place["x"] + place["w"] <= 24, panel["title"]  # Grafana's grid: 24 wide
        for x in range(place["x"], place["x"] + place["w"]):
            for y in range(place["y"], place["y"] + place["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def test_every_setting_the_files_name_is_one_the_server_reads() -> None:
    """What an alert tells an operator to change exists (XLA_CACHE_MAX_TOTAL_BYTES, ...)."""
    settings = {f"XLA_CACHE_{name.upper()}" for name in Settings.model_fields}
    named = set(re.findall(r"\bXLA_CACHE_[A-Z0-9_]+", RULES.read_text() + DASHBOARD.read_text()))
    assert named
    assert named <= settings, sorted(named - settings)


def _all_expressions() -> Iterator[Expression]:
    yield from rule_expressions()
    yield from dashboard_expressions()


@pytest.mark.parametrize("expression", list(_all_expressions()), ids=lambda expression: expression.where)
def test_every_expression_names_only_metrics_the_server_exports(
    expression: Expression, exported: set[str]
) -> None:
    names = metric_names(expression.promql)
    assert names, f"{expression.where} names no metric: {expression.promql}"
    assert names <= exported, f"{expression.where} names {sorted(names - exported)}, not on /metrics"


def test_the_server_exports_the_run_metrics_and_its_budget(scrape: str, exported: set[str]) -> None:
    assert set(RUN_METRICS) <= exported
    assert metric_samples(scrape)[("xla_cache_storage_budget_bytes", ())] == BUDGET_BYTES


@pytest.mark.parametrize(
    ("promql", "names"),
    [
        ('sum by (le) (rate(a_bucket{x="y{z}"}[5m]))', {"a_bucket"}),
        ("a_total / on (framework) group_left b_total offset 1d", {"a_total", "b_total"}),
        ('x and on (job) sum without (instance) (y{route=~"/v1/\\\\{ns\\\\}"}[$__range] @ 1)', {"x", "y"}),
        ("histogram_quantile(0.99, rate(h_bucket[1h:5m])) > 1e3 and bool inf", {"h_bucket"}),
        ('count(xla_cache_nope_total{job=~"$job"}) / 2', {"xla_cache_nope_total"}),
        ("label_values(xla_cache_runs_total, framework)", {"xla_cache_runs_total"}),
    ],
)
def test_the_metric_name_reader(promql: str, names: set[str]) -> None:
    assert metric_names(promql) == names


def test_a_misspelt_metric_is_not_exported(exported: set[str]) -> None:
    assert "xla_cache_run_hit_total" not in exported
    assert "xla_cache_http_requests_total" in exported  # and the names that are, are
    assert "xla_cache_http_request_duration_seconds_bucket" in exported
