"""A run's detail costs what its page costs (issue 42, item 1), against a real ``xla-cache-server`` on either
index backend.

The fourth probe: a few KiB of crafted entries (one graph at many baked sizes, each an ops text as large as
the index keeps) and one run report of their keys, then ``GET /dashboard/runs/ID`` by a read token limited to
one namespace: 17 s of server CPU, a 23 MB answer, the first 1,000 misses explained even at ``limit=0``. Here
a page is explained alone (``limit=0``: none), the counts per reason are the reasons kept with the misses
listed so far, a miss lists at most 16 sizes, a page answers under 1 MB, and a request's CPU and memory are
bounded whatever the entries hold.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cache_server.auth.tokens import Role
from tests.support.api import bearer, put_ok
from tests.support.authed_server import authed_server
from tests.support.crafted_entries import sliced
from tests.support.process_tree import cpu_seconds, peak_rss_mib, reset_peak_rss, rss_bytes
from tests.support.server import LiveServer
from tests.support.wait import QUIET_POLL, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ENTRIES = 40
OPS = 300  # sized ops an entry: 300 differ between any two entries (an ops text of about 20 KiB)
RUN = "run-costly-0001"


@pytest.fixture(params=["sqlite", "postgresql"])
def live(
    request: pytest.FixtureRequest, tmp_path: Path, server_env: dict[str, str]
) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    """A server with auth on; tokens: admin, a write token and a read token, both limited to ``team-a``."""
    tokens = {
        "admin": (Role.ADMIN, None),
        "writer": (Role.WRITE, ["team-a"]),
        "reader": (Role.READ, ["team-a"]),
    }
    with authed_server(request.param, tmp_path, server_env, tokens) as authed:
        yield authed.server, authed.tokens


def _costly_run(server: LiveServer, tokens: dict[str, str]) -> list[str]:
    """The probe's namespace: one graph at ``ENTRIES`` baked sizes, all parsed, and a run that compiled
    each of them; the keys, in the order reported."""
    keys = [f"sliced-{salt:04d}" for salt in range(ENTRIES)]
    with httpx.Client(base_url=server.url, headers=bearer(tokens["writer"]), timeout=60) as api:
        for salt, key in enumerate(keys):
            put_ok(api, "team-a", key, sliced(salt, ops=OPS), created=True)

        def parsed() -> bool:
            stats = httpx.get(
                f"{server.url}/admin/stats", headers=bearer(tokens["admin"]), params={"top": 5}, timeout=30
            ).json()
            return sum(g["entries"] for g in stats["top_graphs"]) == ENTRIES

        wait_until(parsed, timeout=120, interval=QUIET_POLL)
        report = {
            "run_id": RUN,
            "namespace": "team-a",
            "framework": "torch_xla",
            "host": "host-1",
            "process_index": 0,
            "started_at": time.time() - 60,
            "hits": 0,
            "misses": ENTRIES,
            "new_misses": [{"key": key, "module": "crafted", "compile_seconds": 2.0} for key in keys],
        }
        answer = api.post("/v1/runs", json=report)
        assert answer.status_code == 200, answer.text
    return keys


def _measured(server: LiveServer, token: str, **params: Any) -> tuple[httpx.Response, float, float]:
    """``GET /dashboard/runs/RUN`` by ``token``: the answer, the server's CPU seconds spent on it, and how
    much its resident memory grew at the peak (MiB)."""
    before_cpu = cpu_seconds(server.pid)
    exact = reset_peak_rss(server.pid)
    before_rss = rss_bytes([server.pid]) / 2**20
    answer = httpx.get(
        f"{server.url}/dashboard/runs/{RUN}", headers=bearer(token), params=params, timeout=120
    )
    spent = cpu_seconds(server.pid) - before_cpu
    grown = (peak_rss_mib(server.pid) if exact else rss_bytes([server.pid]) / 2**20) - before_rss
    return answer, spent, grown


def test_a_run_detail_costs_what_its_page_costs(live: tuple[LiveServer, dict[str, str]]) -> None:
    server, tokens = live
    keys = _costly_run(server, tokens)
    reader = tokens["reader"]

    counts, spent, _ = _measured(server, reader, limit=0)  # the counts alone: nothing explained
    assert counts.status_code == 200, counts.text
    assert counts.json()["misses"] == [] and counts.json()["reasons_counted"] == 0
    assert spent < 0.5, f"limit=0 cost {spent:.2f} s of server CPU"

    page, spent, grown = _measured(server, reader, limit=100)
    assert page.status_code == 200, page.text
    assert len(page.content) < 1_000_000, f"{len(page.content):,} bytes"
    assert spent < 2.0, f"a page cost {spent:.2f} s of server CPU"
    assert grown < 64, f"the server grew by {grown:.0f} MiB"
    body = page.json()
    listed = body["misses"]
    assert [m["key"] for m in listed] == keys[: len(listed)] and listed
    # the run's first compile of the graph is a new graph, every later one a baked size; those compared
    # name at most 16 sizes, the rest counted
    assert [m["reason"] for m in listed] == ["new_graph"] + ["baked_sizes"] * (len(listed) - 1)
    named = [m for m in listed if m["baked_sizes"]]
    assert named and all(len(m["baked_sizes"]) <= 16 and m["more"] > 0 for m in named)
    reasons = {"new_graph": 1, "baked_sizes": len(listed) - 1}
    assert body["reasons"] == reasons and body["reasons_counted"] == len(listed)

    again, spent, _ = _measured(server, reader, limit=0)  # the counts kept: nothing explained again
    assert again.json()["reasons"] == reasons
    assert spent < 0.5, f"limit=0 cost {spent:.2f} s of server CPU"
