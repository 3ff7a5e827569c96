"""Run reports against a real ``xla-cache-server``, on either index backend (issue 36, item 2): what one
report adds to the fleet-wide ``xla_cache_run_*`` counters is bounded by what its run could have done in
its lifetime (the runs table keeps what it reported), and a token marked ``metrics off`` adds nothing to them
while its runs are still stored and listed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cache_protocol.runs import MAX_COUNT, MAX_SECONDS
from cache_server.auth.tokens import Role, TokenManager
from cache_server.index import Database, TokenRepository
from cache_server.runs.plausible import GRACE_SECONDS, MAX_COMPILE_THREADS, MAX_LOOKUPS_PER_SECOND
from cache_server.settings import Settings
from tests.support.api import bearer
from tests.support.databases import fresh_database_url
from tests.support.run_reports import run_report
from tests.support.server import LiveServer, run_cli, run_server


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


@pytest.fixture(params=["sqlite", "postgresql"])
def live(request: pytest.FixtureRequest, tmp_path: Path, server_env: dict[str, str]) -> Iterator[Live]:
    """A server with auth on over a fresh index of each kind; tokens: admin, a write token limited to
    ``team-*`` (scoped) and another (other)."""
    with fresh_database_url(request.param, tmp_path, at_head=True) as url:
        settings = Settings(data_dir=tmp_path / "data", database_url=url, auth=True)
        database = Database.from_settings(settings)
        manager = TokenManager(TokenRepository(database))
        tokens = {
            "admin": manager.create("ops", Role.ADMIN)[0],
            "scoped": manager.create("scoped", Role.WRITE, ["team-*"])[0],
            "other": manager.create("other", Role.WRITE, ["team-*"])[0],
        }
        database.dispose()
        env = {
            **server_env,
            "XLA_CACHE_AUTH": "on",
            "XLA_CACHE_DATABASE_URL": url,
            "XLA_CACHE_DATA_DIR": str(tmp_path / "data"),
        }
        with run_server(tmp_path / "data", env) as server:
            yield Live(server, env, tokens)


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
