"""The bucketing report against a real ``xla-cache-server``, on either index backend (issue 42, item 2): a
read token limited to one namespace asks for the fourth probe's graph (250 entries of ~500 bytes uploaded,
each a body of one structure whose sized ops fill the index's 64 KiB of ops text) and for ``top=100`` of
such graphs; what the serving process spends on the request (its CPU seconds, its memory) is bounded, the
answer says how many bodies it compared of how many stored, and reports past the server's slots wait a
moment, then get 503 with Retry-After, whichever worker process serves them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cache_protocol import SHA256_HEADER
from cache_server.auth.tokens import Role
from cache_server.background.slots import ServerSlots
from cache_server.graphs.report import (
    BODIES_READ_PER_GRAPH,
    BODY_TEXT_PER_GRAPH,
    BODY_TEXT_PER_REPORT,
    GRAPH_REPORT_SLOTS,
)
from cache_server.settings import Settings
from tests.support.api import bearer, sha
from tests.support.authed_server import authed_server
from tests.support.crafted_entries import sliced
from tests.support.process_tree import cpu_seconds, peak_rss_mib, rss_bytes
from tests.support.server import LiveServer
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

# The probe's graph had 250 entries; 100 are already three times what a report may read of one graph (its
# ops text share, ~34 bodies of ~64 KiB), so an unbounded report still shows in bodies_read and CPU
PROBE_ENTRIES = 100
MORE_GRAPHS, MORE_ENTRIES = 2, 34  # with it, more bodies than one report reads


@dataclass
class Live:
    server: LiveServer
    tokens: dict[str, str]
    settings: Settings

    def client(self, name: str) -> httpx.Client:
        return httpx.Client(base_url=self.server.url, headers=bearer(self.tokens[name]), timeout=120)


@contextmanager
def _live(kind: str, tmp_path: Path, env: dict[str, str], *, workers: int = 1) -> Iterator[Live]:
    """A server with auth on over a fresh index of ``kind``; tokens: admin, a writer of ``team-*`` and a
    reader of ``team-a`` alone."""
    tokens = {
        "admin": (Role.ADMIN, None),
        "writer": (Role.WRITE, ["team-*"]),
        "reader": (Role.READ, ["team-a"]),
    }
    with authed_server(kind, tmp_path, env, tokens, workers=workers) as authed:
        yield Live(authed.server, authed.tokens, authed.settings)


@pytest.fixture(params=["sqlite", "postgresql"])
def live(request: pytest.FixtureRequest, tmp_path: Path, server_env: dict[str, str]) -> Iterator[Live]:
    with _live(request.param, tmp_path, server_env) as server:
        yield server


def _upload(live: Live, module: str, entries: int) -> None:
    """``entries`` of the probe's entries of graph ``module`` in team-a, then wait until all are parsed."""
    with live.client("writer") as api:
        for n in range(entries):
            data = sliced(n, module=module.encode())
            answer = api.put(
                f"/v1/namespaces/team-a/entries/{module}-{n:04d}",
                content=data,
                headers={SHA256_HEADER: sha(data)},
            )
            assert answer.status_code in (200, 201), answer.text

    def parsed() -> bool:  # the stats' top graphs: off graph_counts, no report built
        with live.client("admin") as api:
            graphs = api.get("/admin/stats", params={"top": 20}).json()["top_graphs"]
        return any(g["module"] == module and g["entries"] == entries for g in graphs)

    wait_until(parsed, timeout=180, interval=0.5, message=f"{module}'s entries were never all parsed")


def _report(live: Live, **params: Any) -> tuple[dict[str, Any], int, float, float]:
    """The reader's report of team-a, its size in bytes, and the CPU seconds and MiB of memory (the peak
    over the resident size before) the serving process spent on it."""
    pid = live.server.pid
    resident = rss_bytes([pid]) / 2**20
    before = cpu_seconds(pid)
    with live.client("reader") as api:
        answer = api.get("/admin/graphs", params={"namespace": "team-a", **params})
    spent = cpu_seconds(pid) - before
    assert answer.status_code == 200, answer.text
    return answer.json(), len(answer.content), spent, peak_rss_mib(pid) - resident


def test_the_probes_graphs_cost_what_a_report_may_and_say_what_they_compared(live: Live) -> None:
    _upload(live, "crafted", PROBE_ENTRIES)
    body, size, seconds, memory = _report(live)
    (graph,) = body["graphs"]
    print(f"\nthe probe's graph: {seconds:.2f} s of CPU, {size:,} bytes, +{memory:.0f} MiB at the peak")
    assert graph["entries"] == PROBE_ENTRIES and graph["bodies_stored"] == PROBE_ENTRIES
    # the latest bodies, no more than a graph's share of ops text (~64 KiB each)
    assert 2 <= graph["bodies_read"] <= min(BODIES_READ_PER_GRAPH, BODY_TEXT_PER_GRAPH // 60_000)
    assert graph["baked_sizes"]["entries"] == graph["bodies_read"]
    assert seconds < 1.0 and memory < 64 and size < 64 * 1024

    for n in range(MORE_GRAPHS):
        _upload(live, f"crafted-{n}", MORE_ENTRIES)
    body, size, seconds, memory = _report(live, top=100)
    print(f"top=100 of such graphs: {seconds:.2f} s of CPU, {size:,} bytes, +{memory:.0f} MiB at the peak")
    read = [g["bodies_read"] for g in body["graphs"]]
    assert len(read) == 1 + MORE_GRAPHS
    assert sum(read) * 60_000 <= BODY_TEXT_PER_REPORT  # the request's share, however many graphs
    assert read[-1] < MORE_ENTRIES  # the last graph's said to be cut short
    assert seconds < 2.0 and memory < 64 and size < 256 * 1024


def test_reports_past_the_servers_slots_wait_then_answer_busy(
    tmp_path: Path, server_env: dict[str, str]
) -> None:
    """Two worker processes, one slot, held by this test's own process: every report waits its moment,
    then gets 503 with Retry-After, whichever worker serves it; the slot free, the report is served."""
    env = {**server_env, "XLA_CACHE_GRAPH_REPORTS_AT_ONCE": "1", "XLA_CACHE_GRAPH_REPORT_WAIT_SECONDS": "0.3"}
    with _live("sqlite", tmp_path, env, workers=2) as live:
        _upload(live, "crafted", 3)
        slots = ServerSlots(GRAPH_REPORT_SLOTS, 1, live.settings.slots_directory)
        with slots.hold(timeout=1), live.client("reader") as api:
            for _ in range(4):  # the two workers take turns at the socket
                busy = api.get("/admin/graphs", params={"namespace": "team-a"})
                assert busy.status_code == 503, busy.text
                assert busy.json()["error"] == "graphs_busy" and busy.headers["Retry-After"]
            dashboard = api.get("/dashboard/graphs", params={"namespace": "team-a"})
            assert dashboard.status_code == 503
        with live.client("reader") as api:
            assert api.get("/admin/graphs", params={"namespace": "team-a"}).status_code == 200
