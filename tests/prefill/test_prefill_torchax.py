"""Prefill through torchax (PyTorch through JAX), with real processes: ``xla-cache prefill --framework
torchax`` compiles the model a torchax job passes to ``torchax.compile`` for 50 batch sizes in worker
processes; the unmodified torchax job (``XLA_CACHE_AUTO=1``, a fresh cache directory) then compiles
nothing. A first real run of one size comes first: it stores what the job compiles besides its step (the
parameters' transfers) and leaves the run whose key components the prefill is checked against."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.prefill.prefill_support import env, run_prefill, server_keys, specs_file
from tests.support.auto_jobs import ROOT, last_json, namespaces_in, run_python
from tests.support.needs import require_module
from tests.support.server import LiveServer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOB = str(ROOT / "tests" / "prefill" / "torchax_job.py")
SIZES = range(2, 52)


def test_fifty_prefilled_torchax_shapes_cost_the_job_no_compile(
    hook_python: Path, live_server: LiveServer, tmp_path: Path
) -> None:
    require_module("torchax", "torchax is not installed (scripts/test installs torchax 0.0.7)")

    def job(cache: str, last: int) -> dict[str, int]:
        job_env = env(
            XLA_CACHE_AUTO="1", XLA_CACHE_SERVER=live_server.url, XLA_CACHE_DIR=str(tmp_path / cache)
        )
        return last_json(run_python(hook_python, [JOB, "--first", "1", "--last", str(last)], job_env))

    first = job("first", 1)
    assert first["hits"] == 0 and first["misses"] > 1
    ((namespace, _),) = namespaces_in(tmp_path / "first").items()
    before = server_keys(live_server, namespace)

    calls = [[{"shape": [n, 16], "dtype": "float32"}] for n in SIZES]
    specs = specs_file(tmp_path / "specs.json", calls, "tests.prefill.steps:model")
    code, summary, stderr = run_prefill(live_server, specs, "--framework", "torchax", "--workers", "2")
    assert code == 0, stderr[-3000:]
    assert summary["namespace"] == namespace  # the torchax job's, computed without it
    assert (summary["compiled"], summary["stored"], summary["failed"]) == (len(SIZES), 0, [])
    assert summary["verified"].startswith("verified: key components equal to real run")
    assert not summary["unverified"]  # checked against the first run's report: published as verified
    assert len(server_keys(live_server, namespace) - before) == len(SIZES)

    assert job("second", SIZES[-1]) == {"hits": first["misses"] + len(SIZES), "misses": 0}
