"""A torch_xla job written from the README alone, beside its own ``client.py`` and ``client/``: it warms,
compiles, uploads and shows its run with ``xla-cache runs``, with no ``--server`` and no environment
variable (the config file names the server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.newcomer import cli_json, job_folder, newcomer_env
from tests.support.server import run_server
from tests.support.torch_xla_jobs import job_env

JOB = """
import torch
import torch_xla

import xla_cache
import client  # the job's own

assert client.ROLE == "the job's own", client
report = xla_cache.warm()
print(report.summary(), flush=True)
device = torch_xla.device()
for n in (2, 3, 4):
    print(float((torch.arange(n, dtype=torch.float32, device=device) * 2).sum().cpu()))
"""


def test_a_readme_job_beside_its_own_client_module(tmp_path: Path) -> None:
    """A server of its own: the session's server holds the other tests' namespace, which this job's
    runtime shares."""
    script = job_folder(tmp_path / "job", JOB)
    with run_server(tmp_path / "server") as server:
        env = newcomer_env(job_env(), tmp_path / "home", server.url)
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=script.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        runs = cli_json(env, "runs")["runs"]
        stats = cli_json(env, "stats")  # the namespace the job's warm recorded
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]

    assert len(runs) == 1 and runs[0]["framework"] == "torch_xla"
    assert runs[0]["misses"] >= 3
    assert stats["namespace"]["namespace"] == runs[0]["namespace"]
    assert stats["namespace"]["entries"] >= 3
    cache = tmp_path / "home" / ".cache" / "xla-cache" / runs[0]["namespace"]
    assert len([p for p in cache.iterdir() if p.name.isdigit()]) >= 3
