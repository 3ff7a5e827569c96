"""Two JAX jobs started together, both following: what one compiles reaches the other while it runs.

The server and both cache directories start empty, so every shape was compiled afresh by at least one of the
two: the two agreeing on every shape is each loaded output matching a fresh compile (no third job needed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.following_jobs import run_following_pair
from tests.support.jax_jobs import JOB, JOB_TIMEOUT, jax_env
from tests.support.server import run_server

SHAPES = 200


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_following_jax_jobs_compile_well_under_twice_the_shapes(tmp_path: Path) -> None:
    env = jax_env()
    # A server of its own: the other JAX tests run the same function in the same namespace.
    with run_server(tmp_path / "server") as server:
        results = run_following_pair(JOB, server.url, tmp_path, SHAPES, env=env, timeout=JOB_TIMEOUT)
    misses = [r["misses"] for r in results]
    hits = [r["hits"] for r in results]
    print(
        f"\n[measured] two following JAX jobs, {SHAPES} shapes each in different orders: compiled {misses} "
        f"({sum(misses)} together, {sum(misses) / SHAPES:.2f}x the shapes; without following 2.00x), "
        f"loaded {hits}"
    )
    first, second = (r["digests_by_shape"] for r in results)
    assert len(first) == SHAPES and first == second  # each shape compiled afresh by one of them at least
    assert all(r["hits"] + r["misses"] == SHAPES for r in results)
    assert sum(hits) > 0
    assert sum(misses) < 1.8 * SHAPES
