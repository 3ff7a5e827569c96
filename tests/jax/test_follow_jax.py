"""Two JAX jobs started together, both following: what one compiles reaches the other while it runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.following_jobs import run_following_pair
from tests.support.jax_jobs import JOB, JOB_TIMEOUT, jax_env, run_jax_job
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
    reference, _ = run_jax_job(
        ["--no-warm", "--cache-dir", str(tmp_path / "reference"), "--shapes", str(SHAPES)]
    )
    misses = [r["misses"] for r in results]
    hits = [r["hits"] for r in results]
    print(
        f"\n[measured] two following JAX jobs, {SHAPES} shapes each in different orders: compiled {misses} "
        f"({sum(misses)} together, {sum(misses) / SHAPES:.2f}x the shapes; without following 2.00x), "
        f"loaded {hits}"
    )
    for result in results:
        assert result["digests_by_shape"] == reference["digests_by_shape"]
    assert sum(hits) > 0
    assert sum(misses) < 1.8 * SHAPES
