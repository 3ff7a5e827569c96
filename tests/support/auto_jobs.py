"""Unmodified jobs under ``XLA_CACHE_AUTO=1`` (tests/auto): an interpreter that starts the package's hook as
an install does, and what the jobs leave behind.

:func:`hook_interpreter` makes a virtual environment whose site-packages holds the hook exactly as a wheel
installs it (``xla_cache_auto.pth`` and ``xla_cache_hook.py`` at its root) and reads the test environment's
own site-packages (torch, torch_xla, jax, the client) through ``site.addsitedir``, so ``.pth`` files run as
at any start of Python; the repository's code comes first through ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from cache_protocol import FINGERPRINT_FILE
from tests.support.metrics import metric_samples
from tests.support.torch_xla_jobs import run_cli

__all__ = [
    "AUTO_JOBS",
    "CLIENT",
    "ROOT",
    "TIMEOUT",
    "clean_env",
    "hook_interpreter",
    "last_json",
    "namespaces_in",
    "run_python",
    "runs_of",
    "served",
    "server_keys",
]

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "client"
AUTO_JOBS = ROOT / "tests" / "auto"
TIMEOUT = 400


def hook_interpreter(where: Path, *, with_pip: bool = False) -> Path:
    """A Python whose start runs the hook as an installed package's would; its path."""
    command = [sys.executable, "-m", "venv", str(where)]
    if not with_pip:
        command.insert(3, "--without-pip")
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    site_packages = Path(purelib)
    # "_" sorts before "x": the test environment's packages are on sys.path before the hook's line runs.
    outer = sysconfig.get_paths()["purelib"]
    (site_packages / "_outer_environment.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
    shutil.copy(CLIENT / "xla_cache_auto.pth", site_packages / "xla_cache_auto.pth")
    shutil.copy(CLIENT / "xla_cache_hook.py", site_packages / "xla_cache_hook.py")
    return python


def run_python(
    python: Path, args: list[str], env: Mapping[str, str], *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``python args`` with exactly ``env``; it must succeed unless ``check`` is False."""
    done = subprocess.run(
        [str(python), *args], env=dict(env), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    if check:
        assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return done


def last_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON object a job printed on its last line."""
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def namespaces_in(cache_dir: Path) -> dict[str, dict[str, Any]]:
    """The namespaces warmed under ``cache_dir``: each directory's recorded fingerprint, by name."""
    found: dict[str, dict[str, Any]] = {}
    for directory in sorted(cache_dir.iterdir()) if cache_dir.is_dir() else []:
        recorded = directory / FINGERPRINT_FILE
        if directory.is_dir() and recorded.is_file():
            found[directory.name] = json.loads(recorded.read_text())
    return found


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the client's, torch_xla's and JAX's settings; the repository's code first;
    torch_xla and JAX on the CPU; ``extra`` on top."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("XLA_", "JAX_", "PJRT_")) and k not in ("CPU_NUM_DEVICES", "LIBTPU_INIT_ARGS")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(CLIENT)])
    env["PJRT_DEVICE"] = "CPU"
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_CACHE_CONFIG"] = ""  # no config file of the developer's
    env.update(extra)
    return env


def runs_of(server: str, namespace: str) -> list[dict[str, Any]]:
    """The runs ``xla-cache runs --json`` lists for ``namespace`` on the server at ``server``."""
    listed = run_cli(["runs", "--json", "--server", server, "--namespace", namespace])
    assert listed.returncode == 0, listed.stderr
    runs: list[dict[str, Any]] = json.loads(listed.stdout)["runs"]
    return runs


def server_keys(server: str, namespace: str) -> set[str]:
    """The keys the server's manifest of ``namespace`` lists."""
    manifest = httpx.get(f"{server}/v1/namespaces/{namespace}/manifest", timeout=30).json()
    return {entry["key"] for entry in manifest["entries"]}


def served(server: str, namespace: str) -> float:
    """How many entries of ``namespace`` the server has served (its ``/metrics`` hits): one warm fetches
    each entry it lacks once."""
    samples = metric_samples(httpx.get(f"{server}/metrics", timeout=30).text)
    return samples.get(("xla_cache_hits_total", (("namespace", namespace),)), 0.0)
