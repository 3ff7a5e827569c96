"""Real JAX jobs run as subprocesses on the CPU for the JAX end-to-end tests (tests/jax): the job scripts of
that folder and what they report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["JOB", "JOB_TIMEOUT", "ROOT", "TORCHAX_JOB", "jax_env", "run_jax_job"]

ROOT = Path(__file__).resolve().parents[2]
JAX = ROOT / "tests" / "jax"
JOB = JAX / "jax_job.py"
TORCHAX_JOB = JAX / "torchax_job.py"
JOB_TIMEOUT = 300


def jax_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a job script: this one without its ``XLA_`` and ``JAX_`` settings, JAX on the
    CPU, the repository importable; ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_CACHE_SERVER"] = "none"  # not the default server: a job talks to the server it is given
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def run_jax_job(
    args: list[str], script: Path = JOB, env: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    """Run a job script of this folder (tests/jax/jax_job.py) on the CPU, with ``env`` on top of
    :func:`jax_env`; its JSON result and its log."""
    done = subprocess.run(
        [sys.executable, str(script), *args],
        env=jax_env(env),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{script.name} failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
