"""Run reports against a real ``xla-cache-server``, on either index backend (issue 36, item 2): what one
report adds to the fleet-wide ``xla_cache_run_*`` counters is bounded by what its run could have done in
its lifetime (the runs table keeps what it reported), and a token marked ``metrics off`` adds nothing to them
while its runs are still stored and listed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cache_protocol.runs import MAX_COUNT, MAX_SECONDS
from cache_server.auth.tokens import Role
from cache_server.background.slots import ServerSlots
from cache_server.runs.ingest import RUN_DETAIL_SLOTS
from cache_server.runs.plausible import GRACE_SECONDS, MAX_COMPILE_THREADS, MAX_LOOKUPS_PER_SECOND
from tests.support.api import bearer
from tests.support.authed_server import authed_server
from tests.support.run_reports import run_report
from tests.support.server import LiveServer, run_cli


@dataclass
class Live:
    server: LiveServer
    env: dict[str, str]
    tokens: dict[str, str]

    def client(self, name: str) -> httpx.Client:
        return httpx.Client(base_url=self.server.url, headers=bearer(self.tokens[name]), timeout=60)

    def counter(self, name: str, framework: str) -> float:
        answer = httpx.get(f"{self.server.url}/metrics", headers=bearer(self.tokens["admin"]), timeout=30)
        assert answer.status_code == 200, answer.text
        text = answer.text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels.get("framework") == framework:
                    return float(sample.value)
        return 0.0


@contextmanager
def _live(kind: str, tmp_path: Path, env: dict[str, str]) -> Iterator[Live]:
    """A server with auth on over a fresh index of ``kind``; tokens: admin, two write tokens limited to
    ``team-*`` (scoped, other), and one limited to each of ``team-a`` and ``team-b`` (team-a, team-b)."""
    tokens = {
        "admin": (Role.ADMIN, None),
        "scoped": (Role.WRITE, ["team-*"]),
        "other": (Role.WRITE, ["team-*"]),
        "team-a": (Role.WRITE, ["team-a"]),
        "team-b": (Role.WRITE, ["team-b"]),
    }
    with authed_server(kind, tmp_path, env, tokens) as authed:
        yield Live(authed.server, authed.env, authed.tokens)


@pytest.fixture(params=["sqlite", "postgresql"])
def live(request: pytest.FixtureRequest, tmp_path: Path, server_env: dict[str, str]) -> Iterator[Live]:
    with _live(request.param, tmp_path, server_env) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def budgeted(request: pytest.FixtureRequest, tmp_path: Path, server_env: dict[str, str]) -> Iterator[Live]:
    """As ``live``, with a token keeping at most 3 runs and 2,500 misses, a namespace 4,000 misses."""
    env = {
        **server_env,
        "XLA_CACHE_MAX_RUNS_PER_TOKEN": "3",
        "XLA_CACHE_MAX_RUN_MISSES_PER_TOKEN": "2500",
        "XLA_CACHE_MAX_RUN_MISSES_PER_NAMESPACE": "4000",
    }
    with _live(request.param, tmp_path, env) as server:
        yield server


def test_a_reports_counted_numbers_are_bounded_by_its_lifetime_and_stored_in_full(live: Live) -> None:
    hits_before = live.counter("xla_cache_run_hits_total", "jax")
    compile_before = live.counter("xla_cache_run_compile_seconds_total", "jax")
    with live.client("scoped") as api:
        for n in range(20):  # the probe: 20 reports of the largest numbers the protocol takes
            body = run_report(
                f"run-hostile-{n:04d}",
                namespace="team-a",
                framework="jax",
                hits=MAX_COUNT // 50,
                misses=1,
                compile_seconds=MAX_SECONDS / 50,
            )
            answer = api.post("/v1/runs", json=body)
            assert answer.status_code == 200, answer.text
        stored = api.get("/admin/runs/run-hostile-0000").json()
    assert stored["hits"] == MAX_COUNT // 50  # the runs table keeps what was reported
    lifetime = 60 + GRACE_SECONDS + 30  # started a minute ago; the 30 s the test may take
    hits = live.counter("xla_cache_run_hits_total", "jax") - hits_before
    compiled = live.counter("xla_cache_run_compile_seconds_total", "jax") - compile_before
    assert 0 < hits <= 20 * lifetime * MAX_LOOKUPS_PER_SECOND
    assert 0 < compiled <= 20 * lifetime * MAX_COMPILE_THREADS
    print(f"\n20 hostile reports added {hits:.3g} hits, {compiled:.3g} compile seconds (were 1.8e17, 2e10)")


def test_a_plausible_run_is_counted_in_full_and_an_implausible_one_up_to_its_bound(live: Live) -> None:
    before = live.counter("xla_cache_run_hits_total", "torchax")
    with live.client("scoped") as api:
        now = time.time()
        # Started "now": 1,000,000 hits is over the bound (the 300 s of grace, and the seconds since)...
        first = run_report("run-early-0001", namespace="team-a", framework="torchax", started_at=now)
        assert api.post("/v1/runs", json={**first, "hits": 1_000_000}).status_code == 200
        counted = live.counter("xla_cache_run_hits_total", "torchax") - before
        assert 300_000 <= counted < 330_000
        # ...a run that lived 20 minutes is counted in full.
        late = {**first, "run_id": "run-ended-0001", "started_at": now - 1200, "ended_at": now}
        assert api.post("/v1/runs", json={**late, "hits": 1_000_000}).status_code == 200
    assert live.counter("xla_cache_run_hits_total", "torchax") - before == counted + 1_000_000


def test_a_token_marked_metrics_off_adds_nothing_and_its_runs_are_stored(live: Live) -> None:
    changed = run_cli(live.env, "token", "metrics", "other", "off")
    assert changed.returncode == 0, changed.stderr
    assert "not counted" in changed.stdout
    listed = run_cli(live.env, "token", "list", "--json")
    assert '"metrics_off": true' in listed.stdout
    runs = live.counter("xla_cache_runs_total", "torch_xla")
    hits = live.counter("xla_cache_run_hits_total", "torch_xla")
    with live.client("other") as api:
        body = run_report("run-muted-0001", namespace="team-b", hits=500, misses=3, compile_seconds=2.0)
        assert api.post("/v1/runs", json=body).status_code == 200
        shown = api.get("/admin/runs/run-muted-0001")
        assert shown.status_code == 200 and shown.json()["hits"] == 500
    assert live.counter("xla_cache_runs_total", "torch_xla") == runs
    assert live.counter("xla_cache_run_hits_total", "torch_xla") == hits
    with live.client("scoped") as api:  # another token is counted as before
        body = run_report("run-counted-001", namespace="team-b", hits=500)
        assert api.post("/v1/runs", json=body).status_code == 200
    assert live.counter("xla_cache_run_hits_total", "torch_xla") == hits + 500
    assert run_cli(live.env, "token", "metrics", "other", "on").returncode == 0
    assert run_cli(live.env, "token", "metrics", "nobody", "off").returncode == 1
    # the same over HTTP, for an operator with an admin token and no shell on the server
    with live.client("admin") as admin, live.client("other") as api:
        assert api.put("/admin/tokens/other/metrics", json={"counted": False}).status_code == 403
        turned = admin.put("/admin/tokens/other/metrics", json={"counted": False})
        assert turned.status_code == 200, turned.text
        assert [(t["name"], t["metrics_off"]) for t in turned.json()["tokens"]] == [("other", True)]
        listed = {u["token"]["name"]: u["token"] for u in admin.get("/admin/tokens").json()["tokens"]}
        assert listed["other"]["metrics_off"] and not listed["scoped"]["metrics_off"]
        hits = live.counter("xla_cache_run_hits_total", "torch_xla")
        body = run_report("run-muted-0002", namespace="team-b", hits=300)
        assert api.post("/v1/runs", json=body).status_code == 200
        assert live.counter("xla_cache_run_hits_total", "torch_xla") == hits
        assert admin.put("/admin/tokens/other/metrics", json={"counted": True}).status_code == 200
        body = run_report("run-counted-002", namespace="team-b", hits=300)
        assert api.post("/v1/runs", json=body).status_code == 200
        assert live.counter("xla_cache_run_hits_total", "torch_xla") == hits + 300
        assert admin.put("/admin/tokens/nobody/metrics", json={"counted": False}).status_code == 404
        for bad in ({"counted": "false"}, {"counted": 0}, {}, {"counted": False, "also": 1}):
            refused = admin.put("/admin/tokens/other/metrics", json=bad)
            assert refused.status_code == 400, (bad, refused.text)


def _misses(run_id: str, first: int, count: int, namespace: str = "team-a") -> dict[str, object]:
    new = [{"key": f"{run_id}-{i:06d}", "module": "jit_step"} for i in range(first, first + count)]
    return run_report(run_id, namespace=namespace, misses=first + count, new_misses=new)


def test_what_runs_keep_counts_against_the_tokens_and_the_namespaces_budget(budgeted: Live) -> None:
    def stored(api: httpx.Client, run_id: str) -> tuple[int, int]:
        shown = api.get(f"/admin/runs/{run_id}", params={"limit": 0})
        assert shown.status_code == 200, shown.text
        return shown.json()["misses_stored"], shown.json()["misses_total"]

    with budgeted.client("scoped") as api:
        for first in (0, 1000):
            assert api.post("/v1/runs", json=_misses("run-budget-a", first, 1000)).status_code == 200
        answer = api.post("/v1/runs", json=_misses("run-budget-b", 0, 1000))
        assert answer.status_code == 200, answer.text
        assert stored(api, "run-budget-a") == (2000, 2000)
        assert stored(api, "run-budget-b") == (500, 1000)  # the token's 2,500: the rest counted only
        assert api.post("/v1/runs", json=run_report("run-budget-c", namespace="team-a")).status_code == 200
        refused = api.post("/v1/runs", json=_misses("run-budget-d", 0, 10))  # a fourth run
        assert refused.status_code == 507, refused.text
        assert refused.json()["error"] == "quota_exceeded"
        assert "XLA_CACHE_MAX_RUNS_PER_TOKEN" in refused.json()["detail"]
        assert api.get("/admin/runs/run-budget-d").status_code == 404  # nothing stored
        later = api.post("/v1/runs", json={**_misses("run-budget-a", 2000, 5), "hits": 7})  # a kept run
        assert later.status_code == 200 and later.json()["hits"] == 7
        assert stored(api, "run-budget-a") == (2000, 2005)
    with budgeted.client("other") as api:
        for first in (0, 1000):
            assert api.post("/v1/runs", json=_misses("run-other-a", first, 1000)).status_code == 200
        assert stored(api, "run-other-a") == (1500, 2000)  # the namespace's 4,000 (2,500 were there)
        assert api.post("/v1/runs", json=_misses("run-other-b", 0, 500, "team-b")).status_code == 200
        assert stored(api, "run-other-b") == (500, 500)  # another namespace: its own budget


def test_a_run_of_10000_misses_pages_and_a_page_is_bounded(live: Live) -> None:
    with live.client("scoped") as api:
        for first in range(0, 10_000, 1000):
            assert api.post("/v1/runs", json=_misses("run-paged-0001", first, 1000)).status_code == 200
        whole = api.get("/admin/runs/run-paged-0001", params={"limit": 10_000})  # the probe's request
        assert whole.status_code == 400, whole.text
        start = time.perf_counter()
        page = api.get("/admin/runs/run-paged-0001", params={"limit": 100})
        took = time.perf_counter() - start
        assert page.status_code == 200, page.text
        body = page.json()
        assert (body["misses_stored"], body["reasons_counted"], len(body["misses"])) == (10_000, 100, 100)
        assert body["misses"][0]["key"] == "run-paged-0001-000000"
        last = api.get("/admin/runs/run-paged-0001", params={"limit": 1000, "offset": 9_900}).json()
        assert [m["key"] for m in last["misses"]][-1] == "run-paged-0001-009999" and len(
            last["misses"]
        ) == 100
    print(f"\nfirst page of a run of 10,000 misses: {took:.3f} s")


def test_a_run_id_prefix_is_looked_up_among_the_runs_the_token_sees_and_exactly(live: Live) -> None:
    """Issue 42, item 6: the candidates of a prefix were taken (11) before the token's namespaces filtered
    them, so another team's runs hid a unique prefix (404) and showed through the 409's ``, ...``; and
    SQLite's LIKE matched ``ABCD`` to ``abcd...``."""
    with live.client("team-a") as team_a, live.client("team-b") as team_b:

        def post(api: httpx.Client, run_id: str) -> None:
            namespace = "team-a" if api is team_a else "team-b"
            answer = api.post("/v1/runs", json=run_report(run_id, namespace=namespace))
            assert answer.status_code == 200, answer.text

        for n in range(11):
            post(team_b, f"feed-b-{n:04d}")  # sort ahead of team-a's own feedz-...
        post(team_a, "feedz-a-0001")
        unique = team_a.get("/admin/runs/feed")
        assert unique.status_code == 200, unique.text  # was 404
        assert unique.json()["run_id"] == "feedz-a-0001"

        for n in range(11):
            post(team_a, f"leak-a-{n:02d}")
        post(team_b, "leak-a-00-team-b")  # sorts among team-a's: its presence took a place in the 11
        ambiguous = team_a.get("/admin/runs/leak-a")
        assert ambiguous.status_code == 409, ambiguous.text
        detail = ambiguous.json()["detail"]
        assert "team-b" not in detail and detail.count("leak-a-") == 10  # 10 shown
        assert detail.endswith(", .... Give more of the id.")  # 11 visible: was no "...", a hidden run
        post(team_a, "leak-a-xx")
        assert team_a.get("/admin/runs/leak-a-x").json()["run_id"] == "leak-a-xx"
        assert team_b.get("/admin/runs/leak-a").json()["run_id"] == "leak-a-00-team-b"  # its one run

        post(team_b, "mine0001")  # a whole id of team-b is a prefix of team-a's run
        post(team_a, "mine0001-a")
        assert team_a.get("/admin/runs/mine0001").json()["run_id"] == "mine0001-a"
        assert team_b.get("/admin/runs/mine0001").json()["run_id"] == "mine0001"

        post(team_a, "abcd-case-0001")
        for other_case in ("ABCD", "Abcd-case", "ABCD-CASE-0001"):
            assert team_a.get(f"/admin/runs/{other_case}").status_code == 404, other_case  # SQLite: 200
        assert team_a.get("/admin/runs/abcd").json()["run_id"] == "abcd-case-0001"
    with live.client("admin") as admin:  # an unscoped token sees every run the prefix starts
        assert admin.get("/admin/runs/feed").status_code == 409
        assert admin.get("/admin/runs/feedz").json()["run_id"] == "feedz-a-0001"


def test_details_past_the_servers_slots_wait_then_answer_busy(
    tmp_path: Path, server_env: dict[str, str]
) -> None:
    """Issue 42 item 1: the bound on details explained at once is the server's, not each process's. Two
    worker processes, one slot, held by this test's own process: every detail waits its moment, then gets
    503 ``runs_busy`` with Retry-After, whichever worker serves it; ``limit=0`` explains nothing and is
    answered; the slot free, the detail is served."""
    env = {**server_env, "XLA_CACHE_RUN_DETAILS_AT_ONCE": "1", "XLA_CACHE_RUN_DETAIL_WAIT_SECONDS": "0.3"}
    tokens = {"admin": (Role.ADMIN, None)}
    with authed_server("sqlite", tmp_path, env, tokens, workers=2) as authed:
        url, headers = authed.server.url, bearer(authed.tokens["admin"])
        with httpx.Client(base_url=url, headers=headers, timeout=60) as api:
            assert api.post("/v1/runs", json=_misses("run-busy-0001", 0, 5)).status_code == 200
            slots = ServerSlots(RUN_DETAIL_SLOTS, 1, authed.settings.slots_directory)
            with slots.hold(timeout=1):
                for _ in range(4):  # the two workers take turns at the socket
                    busy = api.get("/admin/runs/run-busy-0001")
                    assert busy.status_code == 503, busy.text
                    assert busy.json()["error"] == "runs_busy" and busy.headers["Retry-After"]
                assert api.get("/admin/runs/run-busy-0001", params={"limit": 0}).status_code == 200
            served = api.get("/admin/runs/run-busy-0001")
            assert served.status_code == 200 and len(served.json()["misses"]) == 5
