"""Two JAX jobs started together, both following: what one compiles reaches the other while it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.jax_jobs import JOB, JOB_TIMEOUT, ROOT, run_jax_job
from tests.support.server import LiveServer, run_server

SHAPES = 200


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_following_jax_jobs_compile_well_under_twice_the_shapes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    # A server of its own: the other JAX tests run the same function in the same namespace.
    with run_server(tmp_path / "server") as server:
        results = _run_pair(server, tmp_path, env)
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


def _run_pair(server: LiveServer, tmp_path: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """Two jobs started together, following, in different orders; their results."""
    jobs = [
        subprocess.Popen(
            [
                sys.executable,
                str(JOB),
                "--server",
                server.url,
                "--cache-dir",
                str(tmp_path / f"job{seed}"),
                "--shapes",
                str(SHAPES),
                "--order-seed",
                str(seed),
                "--follow",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    results = []
    for job in jobs:
        out, err = job.communicate(timeout=JOB_TIMEOUT)
        assert job.returncode == 0, err[-4000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results
