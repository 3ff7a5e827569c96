"""Two torch_xla jobs started together, both following: what one compiles reaches the other while it runs.

Each runs the same 200 shapes of the fuse-embedding step, in its own random order, against one real server.
Without following each would compile all 200 (400 together); following, a shape the other job compiled a
moment earlier is loaded from the cache directory instead. Their outputs must match a job without the cache:
the server and both cache directories start empty, so every shape was compiled afresh by at least one of the
two, and the two agreeing on every shape is each loaded output matching a fresh compile (no third job needed).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.following_jobs import run_following_pair
from tests.support.server import run_server
from tests.support.torch_xla_jobs import JOB, JOB_TIMEOUT, job_env

SHAPES = 200


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_following_jobs_compile_well_under_twice_the_shapes(tmp_path: Path) -> None:
    with run_server(tmp_path / "server") as server:
        results = run_following_pair(JOB, server.url, tmp_path, SHAPES, env=job_env(), timeout=JOB_TIMEOUT)
        totals = httpx.get(f"{server.url}/admin/stats").json()["totals"]
    compiles = [r["counters"]["UncachedCompile"] for r in results]
    loaded = [r["counters"]["PersistentCacheHit"] for r in results]
    print(
        f"\n[measured] two following jobs, {SHAPES} shapes each in different orders: compiled {compiles} "
        f"({sum(compiles)} together, {sum(compiles) / SHAPES:.2f}x the shapes; without following 2.00x), "
        f"loaded from the other job {loaded}; loops took {[round(r['loop_seconds'], 1) for r in results]} s; "
        f"server counted {totals['live_deliveries']} live deliveries"
    )
    first, second = (r["digests_by_shape"] for r in results)
    assert len(first) == SHAPES and first == second  # each shape compiled afresh by one of them at least
    for result in results:
        assert result["counters"]["PersistentCacheDeserializeFailure"] == 0
        assert result["counters"]["UncachedCompile"] + result["counters"]["PersistentCacheHit"] >= SHAPES
    assert sum(loaded) > 0 and totals["live_deliveries"] > 0
    assert sum(compiles) < 1.8 * SHAPES
