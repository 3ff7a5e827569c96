"""The hook in real interpreters: off, it imports nothing but itself; on, processes that never import a
framework (pip) do nothing, even with a broken config file; ``doctor --auto`` says where it stands; and
``xla-cache run`` makes a ``python -S`` job, whose start reads no ``.pth`` file, warm as the hook would."""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.auto_jobs import AUTO_JOBS, clean_env, last_json, run_python
from tests.support.needs import require_module
from tests.support.server import LiveServer

pytestmark = pytest.mark.e2e

HEAVY = ("torch", "torch_xla", "jax", "httpx", "xla_cache", "cache_protocol")


@pytest.mark.parametrize("auto", ["", "1"])
def test_the_hook_imports_nothing_but_itself_before_a_framework(hook_python: Path, auto: str) -> None:
    code = "import sys; print(__import__('json').dumps(sorted(sys.modules)))"
    done = run_python(hook_python, ["-c", code], clean_env(XLA_CACHE_AUTO=auto))
    modules = json.loads(done.stdout)
    assert "xla_cache_hook" in modules
    assert [m for m in modules if m.split(".")[0] in HEAVY] == []
    assert done.stderr == ""


@pytest.mark.parametrize("auto", ["", "1"])
def test_pip_works_with_a_broken_config_file(hook_python: Path, tmp_path: Path, auto: str) -> None:
    broken = tmp_path / "config.toml"
    broken.write_text("server = [not toml\n")
    env = clean_env(XLA_CACHE_AUTO=auto, XLA_CACHE_CONFIG=str(broken))
    done = run_python(hook_python, ["-m", "pip", "--version"], env)
    assert done.stdout.startswith("pip ") and done.stderr == ""


def test_doctor_says_whether_auto_activation_is_on(hook_python: Path) -> None:
    code = "from xla_cache.cli import main; raise SystemExit(main(['doctor', '--auto', '--json']))"
    off = json.loads(run_python(hook_python, ["-c", code], clean_env()).stdout)
    assert not off["on"] and off["reason"] == "XLA_CACHE_AUTO is not set to 1"
    on = json.loads(run_python(hook_python, ["-c", code], clean_env(XLA_CACHE_AUTO="1")).stdout)
    assert on["on"] and on["started_here"] and on["hook_files"]
    env = clean_env(XLA_CACHE_AUTO="1")
    env["PYTHONPATH"] += os.pathsep + sysconfig.get_paths()["purelib"]  # python -S: no site directory
    bare = json.loads(run_python(hook_python, ["-S", "-c", code], env).stdout)
    assert not bare["on"] and "python -S" in bare["reason"]


@pytest.mark.slow
def test_a_python_S_job_warms_through_xla_cache_run(live_server: LiveServer, tmp_path: Path) -> None:
    require_module("jax", "jax is not installed (scripts/test installs jax 0.10)")
    xla_cache = str(Path(sys.executable).with_name("xla-cache"))
    env = clean_env()
    # python -S reads no site directory: the job finds its packages on its own PYTHONPATH.
    env["PYTHONPATH"] += os.pathsep + sysconfig.get_paths()["purelib"]
    results = []
    for vm in ("A", "B"):
        command = [
            xla_cache, "run", "--server", live_server.url, "--cache-dir", str(tmp_path / vm), "--",
            sys.executable, "-S", str(AUTO_JOBS / "jax_job.py"), "--sizes", "2",
        ]  # fmt: skip
        done = run_python(Path(command[0]), command[1:], env)
        results.append(last_json(done))
    first, second = results
    assert first["client"] and first["misses"] >= 2
    assert second == {"hits": first["misses"], "misses": 0, "client": True}
