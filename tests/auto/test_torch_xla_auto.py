"""An unmodified torch_xla 2.7 SPMD job (it calls ``xr.use_spmd()`` after importing torch_xla and never
imports xla_cache) warms and uploads with ``XLA_CACHE_AUTO=1`` alone: run twice, the second time in a fresh
cache directory as a new VM would, the second run compiles nothing, its namespace is the SPMD runtime's
(the fingerprint taken once the runtime was known, not at import), and both runs are reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.auto_jobs import AUTO_JOBS, clean_env, last_json, namespaces_in, run_python
from tests.support.needs import require_module
from tests.support.server import LiveServer
from tests.support.torch_xla_jobs import run_cli
from xla_cache import namespace_id

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SHAPES = 3


def test_an_unmodified_spmd_job_warms_and_uploads_with_one_variable(
    hook_python: Path, live_server: LiveServer, tmp_path: Path
) -> None:
    require_module("torch_xla", "torch_xla is not installed (scripts/test installs torch_xla 2.7)")
    job = [str(AUTO_JOBS / "torch_xla_job.py"), "--shapes", str(SHAPES), "--spmd"]
    results = []
    for vm in ("A", "B"):
        env = clean_env(
            XLA_CACHE_AUTO="1", XLA_CACHE_SERVER=live_server.url, XLA_CACHE_DIR=str(tmp_path / vm)
        )
        done = run_python(hook_python, job, env)
        assert "WARNING" not in done.stderr, done.stderr[-3000:]
        results.append(last_json(done))
    first, second = results
    assert first["client_loaded"] and first["counters"]["UncachedCompile"] == SHAPES
    assert second["counters"] == {"PersistentCacheHit": SHAPES, "UncachedCompile": 0}

    (name, fingerprint), *others = namespaces_in(tmp_path / "B").items()
    assert others == [] and namespace_id(fingerprint) == name
    assert fingerprint["spmd"] is True and fingerprint["process_index"] is None  # use_spmd() was seen
    assert namespaces_in(tmp_path / "A") == {name: fingerprint}

    listed = run_cli(["runs", "--json", "--server", live_server.url, "--namespace", name])
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)["runs"]
    assert sorted((run["misses"], run["hits"]) for run in runs) == [(0, SHAPES), (SHAPES, 0)]
