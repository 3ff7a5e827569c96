"""Real torch_xla jobs run as subprocesses for the end-to-end tests (tests/e2e): the job scripts of that
folder, a clean environment for them on the CPU, and what they report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FIRST_JOB_SHAPES",
    "JOB",
    "JOB_TIMEOUT",
    "ROOT",
    "SPAWN_JOB",
    "JobResult",
    "job_env",
    "run_cli",
    "run_job",
    "run_spawn_job",
]

ROOT = Path(__file__).resolve().parents[2]
E2E = ROOT / "tests" / "e2e"
JOB = E2E / "fuse_job.py"
JOB_TIMEOUT = 400
FIRST_JOB_SHAPES = 60


def job_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for a torch_xla job on CPU (no cache settings or flags from the shell)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("XLA_") and k not in ("CPU_NUM_DEVICES", "LIBTPU_INIT_ARGS", "PJRT_DEVICE")
    }
    env["PJRT_DEVICE"] = "CPU"
    env["XLA_CACHE_SERVER"] = "none"  # not the default server: a job talks to the server it is given
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


SPAWN_JOB = E2E / "spawn_job.py"


def run_spawn_job(args: list[str], env: Mapping[str, str] | None = None) -> dict[int, dict[str, Any]]:
    """Run tests/e2e/spawn_job.py (xmp.spawn); each rank's JSON result by rank."""
    done = _run_script(SPAWN_JOB, args, env)
    results = [
        json.loads(line[len("RESULT ") :]) for line in done.stdout.splitlines() if line.startswith("RESULT ")
    ]
    return {result["rank"]: result for result in results}
