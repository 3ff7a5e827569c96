"""End-to-end fixtures: a real ``xla-cache-server`` process and real torch_xla jobs as subprocesses.

torch_xla is required. Without it these tests are skipped on a developer machine, but FAIL when the ``CI``
variable is set: CI installs torch 2.7 and torch_xla 2.7 with the project's own ``scripts/test``, so a missing
torch_xla there is a broken setup, not a reason to pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.needs import require_module
from tests.support.server import LiveServer, run_server

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("fuse_job.py")
JOB_TIMEOUT = 400


def _require_torch_xla() -> None:
    require_module(
        "torch_xla",
        "torch_xla is not installed: the end-to-end tests need torch==2.7.0 and torch_xla==2.7.0 "
        "(scripts/test installs them)",
    )


@pytest.fixture(autouse=True)
def _torch_xla_present() -> None:
    _require_torch_xla()


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real server for the whole end-to-end session (each test uses its own namespace or data)."""
    _require_torch_xla()
    with run_server(tmp_path_factory.mktemp("e2e-server")) as server:
        yield server


def job_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for a torch_xla job on CPU (no cache settings or flags from the shell)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("XLA_") and k not in ("CPU_NUM_DEVICES", "LIBTPU_INIT_ARGS", "PJRT_DEVICE")
    }
    env["PJRT_DEVICE"] = "CPU"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


@dataclass
class JobResult:
    data: dict[str, Any]
    stderr: str

    @property
    def counters(self) -> dict[str, int]:
        return dict(self.data["counters"])

    @property
    def warm(self) -> dict[str, Any]:
        return dict(self.data["warm"])

    def cache_warnings(self) -> list[str]:
        """The client's warning lines in the job's log."""
        return [line for line in self.stderr.splitlines() if line.startswith("WARNING xla_cache")]


def _run_script(
    script: Path, args: list[str], env: Mapping[str, str] | None
) -> subprocess.CompletedProcess[str]:
    """Run a job script of this folder with the test interpreter; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(script), *args],
        env=job_env(env),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{script.name} failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return done


def run_job(args: list[str], env: Mapping[str, str] | None = None) -> JobResult:
    """Run tests/e2e/fuse_job.py; its JSON result and its log."""
    done = _run_script(JOB, args, env)
    last = done.stdout.strip().splitlines()[-1]
    return JobResult(json.loads(last), done.stderr)


def run_cli(args: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the ``xla-cache`` console script."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("xla-cache")), *args],
        env=job_env(env),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        check=False,
    )


FIRST_JOB_SHAPES = 60


@pytest.fixture(scope="session")
def first_job(live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[JobResult, Path]:
    """Job 1: an empty cache directory, one graph per shape, everything uploaded. Shared by the tests that
    need a server holding real entries (and reference outputs)."""
    cache = tmp_path_factory.mktemp("job1-cache")
    result = run_job(
        ["--server", live_server.url, "--cache-dir", str(cache), "--shapes", str(FIRST_JOB_SHAPES)]
    )
    return result, cache


SPAWN_JOB = Path(__file__).with_name("spawn_job.py")


def run_spawn_job(args: list[str], env: Mapping[str, str] | None = None) -> dict[int, dict[str, Any]]:
    """Run tests/e2e/spawn_job.py (xmp.spawn); each rank's JSON result by rank."""
    done = _run_script(SPAWN_JOB, args, env)
    results = [
        json.loads(line[len("RESULT ") :]) for line in done.stdout.splitlines() if line.startswith("RESULT ")
    ]
    return {result["rank"]: result for result in results}
