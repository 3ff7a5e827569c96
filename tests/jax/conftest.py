"""Fixtures of the JAX end-to-end tests: a real ``xla-cache-server`` process and real JAX jobs on the CPU.

JAX is required. Without it these tests are skipped on a developer machine, but FAIL when the ``CI`` variable
is set: ``scripts/test`` installs jax 0.10 with the rest of the test environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.needs import require_module
from tests.support.server import LiveServer, run_server

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("jax_job.py")
TORCHAX_JOB = Path(__file__).with_name("torchax_job.py")
JOB_TIMEOUT = 300


def _require_jax() -> None:
    require_module(
        "jax", "jax is not installed: the JAX end-to-end tests need jax 0.10 (scripts/test installs it)"
    )


@pytest.fixture(autouse=True)
def _jax_present() -> None:
    _require_jax()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real server for the module (each test uses its own cache directories)."""
    _require_jax()
    with run_server(tmp_path_factory.mktemp("jax-server")) as server:
        yield server


def run_jax_job(args: list[str], script: Path = JOB) -> tuple[dict[str, Any], str]:
    """Run a job script of this folder (tests/jax/jax_job.py) on the CPU; its JSON result and its log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{script.name} failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
