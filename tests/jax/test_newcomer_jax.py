"""A JAX job written from the README alone, beside its own ``client.py`` and ``client/``: it warms, compiles,
uploads and shows its run with ``xla-cache runs``, with no ``--server`` and no environment variable (the
config file names the server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.jax_jobs import jax_env
from tests.support.newcomer import cli_json, job_folder, newcomer_env
from tests.support.server import LiveServer

JOB = """
import jax
import jax.numpy as jnp

import xla_cache
import client  # the job's own

assert client.ROLE == "the job's own", client
report = xla_cache.warm()
print(report.summary(), flush=True)


@jax.jit
def step(x):
    return (x * 2).sum()


for n in (2, 3, 4):
    print(float(step(jnp.arange(n, dtype=jnp.float32))))
"""


def test_a_readme_jax_job_beside_its_own_client_module(live_server: LiveServer, tmp_path: Path) -> None:
    script = job_folder(tmp_path / "job", JOB)
    env = newcomer_env(jax_env(), tmp_path / "home", live_server.url)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=script.parent, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]

    runs = cli_json(env, "runs")["runs"]
    assert len(runs) == 1 and runs[0]["framework"] == "jax"
    assert runs[0]["misses"] >= 3
    stats = cli_json(env, "stats")  # the namespace the job's warm recorded
    assert stats["namespace"]["namespace"] == runs[0]["namespace"]
    assert stats["namespace"]["entries"] >= 3
