"""One set of numbers (issue 46, item 6), against a real ``xla-cache-server`` on either index backend.

"Saved" is defined once (:mod:`cache_protocol.runs`): a hit saves what its entry cost to compile, the time
recorded with that entry, summed per run, per namespace and for the server. Server lookups (a manifest or
GET that found its key) are downloads, not loads: they never count as saved nor in a hit rate. The same hit
rate, saved time and compiles appear in ``xla-cache stats --json``, in the sum of ``xla-cache runs --json``
and in the dashboard's data, each block labelled by its scope.

The issue's probe: hits on graphs that cost 0.74 s and 5.86 s were claimed as 2 x 0.75 s (the namespace's
average of what lookups served), and 3.4 min "saved" stood beside the jobs' 1.1 min.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api import entry_url, put_ok
from tests.support.cli import run_xla_cache
from tests.support.databases import fresh_database_url
from tests.support.run_reports import run_report
from tests.support.server import LiveServer, run_server

# compile times recorded with each entry (ms), by namespace and key
COMPILED = {
    "team-a": {"a" * 40: 740, "b" * 40: 5860, "c" * 40: 3000, "d" * 40: 0},
    "team-b": {"e" * 40: 2000},
}
A, B, C, D = COMPILED["team-a"]
(E,) = COMPILED["team-b"]


@pytest.fixture(params=["sqlite", "postgresql"])
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveServer]:
    with (
        fresh_database_url(request.param, tmp_path, at_head=True) as url,
        run_server(tmp_path / "data", {"XLA_CACHE_DATABASE_URL": url}) as server,
    ):
        yield server


def _post(http: httpx.Client, body: dict[str, Any]) -> None:
    answer = http.post("/v1/runs", json=body)
    assert answer.status_code == 200, answer.text


def _seed(server: LiveServer) -> None:
    """The entries with their compile times; lookups of them (many, which must count for nothing); four
    runs, one of them reporting its hits over two reports."""
    started = time.time() - 120
    with httpx.Client(base_url=server.url, timeout=60) as http:
        for namespace, entries in COMPILED.items():
            for key, ms in entries.items():
                put_ok(http, namespace, key, f"{namespace}/{key}".encode(), compile_ms=ms or None)
        for _ in range(10):  # downloads no job may have used
            for key in (A, B, C):
                assert http.get(entry_url("team-a", key)).status_code == 200
        run = {"namespace": "team-a", "started_at": started}
        _post(
            http, run_report("run-a-00000001", **run, hits=2, misses=1, compile_seconds=4.0, hit_keys=[A, B])
        )
        _post(http, run_report("run-a-00000001", **run, hits=3, misses=1, compile_seconds=4.0, hit_keys=[C]))
        _post(
            http, run_report("run-a-00000002", **run, hits=2, misses=2, compile_seconds=10.0, hit_keys=[A, D])
        )
        _post(http, run_report("run-a-00000003", **run, hits=1, misses=0, hit_keys=[]))  # a noatime host
        _post(
            http,
            run_report(
                "run-b-00000001",
                namespace="team-b",
                started_at=started,
                hits=1,
                misses=3,
                compile_seconds=6.5,
                hit_keys=[E],
            ),
        )


def _numbers(block: dict[str, Any]) -> tuple[int, int, float, float]:
    """(loaded, compiled, compile seconds paid, saved seconds) of a jobs block, rounded."""
    return (
        block["hits"],
        block["compiles"],
        round(block["compile_seconds"], 3),
        round(block["saved_seconds"], 3),
    )


def _summed(runs: list[dict[str, Any]]) -> tuple[int, int, float, float]:
    return (
        sum(r["hits"] for r in runs),
        sum(r["misses"] for r in runs),
        round(sum(r["compile_seconds"] for r in runs), 3),
        round(sum(r["saved_seconds"] for r in runs), 3),
    )


def test_saved_is_what_each_loaded_entry_cost_and_every_view_agrees(live: LiveServer) -> None:
    _seed(live)
    env = {"XLA_CACHE_SERVER": live.url}

    runs = json.loads(run_xla_cache(env, "runs", "--json").stdout)["runs"]
    saved = {r["run_id"]: r["saved_seconds"] for r in runs}
    # each hit priced by its own entry: 0.74 + 5.86 + 3.0, not 3 x a namespace average
    assert saved == {
        "run-a-00000001": pytest.approx(9.6),
        "run-a-00000002": pytest.approx(0.74),  # D was stored without a compile time: it adds 0
        "run-a-00000003": 0.0,
        "run-b-00000001": pytest.approx(2.0),
    }
    team_a = [r for r in runs if r["namespace"] == "team-a"]
    assert _summed(team_a) == (6, 3, 14.0, 10.34)
    assert _summed(runs) == (7, 6, 20.5, 12.34)

    done = run_xla_cache(env, "stats", "--namespace", "team-a", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert _numbers(stats["namespace_jobs"]) == _summed(team_a)
    assert stats["namespace_jobs"]["hit_rate"] == pytest.approx(6 / 9)
    server = stats["admin"]
    assert _numbers(server["jobs"]) == _summed(runs)
    assert server["jobs"]["hit_rate"] == pytest.approx(7 / 13)
    rows = {n["namespace"]: n["jobs"] for n in server["namespaces"]}
    assert _numbers(rows["team-a"]) == _summed(team_a) and rows["team-a"]["runs"] == 3
    assert _numbers(rows["team-b"]) == _summed([r for r in runs if r["namespace"] == "team-b"])
    # the days: each run counted on the day it started, the days summing to the whole
    days = [d["jobs"] for d in server["daily"]]
    assert tuple(sum(d[k] for d in days) for k in ("hits", "compiles")) == (7, 6)
    assert round(sum(d["saved_seconds"] for d in days), 3) == 12.34
    assert server["totals"]["hits"] == 30  # the lookups are still counted, as lookups

    dashboard = httpx.get(f"{live.url}/dashboard/data", timeout=60).json()
    assert _numbers(dashboard["jobs"]) == _summed(runs)
    assert {n["namespace"]: _numbers(n["jobs"]) for n in dashboard["namespaces"]} == {
        name: _numbers(row) for name, row in rows.items()
    }
    assert [d["jobs"] for d in dashboard["daily"]] == days

    text = run_xla_cache(env, "stats", "--namespace", "team-a").stdout
    ours, _, rest = text.partition("server (every namespace)")
    assert "what jobs reported (runs started in the last 30 days: 3)" in ours
    assert "66.7 %" in ours and "10.3 s saved by hits" in ours
    assert "what jobs reported (runs started in the last 30 days: 4)" in rest
    assert "53.8 %" in rest and "12.3 s saved by hits" in rest
    assert "30 found" in rest and "not the jobs' hit rate" in rest


def test_a_report_naming_a_bad_hit_key_stores_nothing(live: LiveServer) -> None:
    with httpx.Client(base_url=live.url, timeout=60) as http:
        for bad in (["../x"], [A, A], [A] * 1001):
            answer = http.post("/v1/runs", json=run_report(hits=1, hit_keys=bad))
            assert answer.status_code in (400, 422), answer.text
        assert http.get("/admin/runs").json()["runs"] == []
