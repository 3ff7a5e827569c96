"""docs/prefill.md's example, run as the page says: the seed's fuse step through torchax, its nine bucket
shapes prefilled on this host, then the job (``XLA_CACHE_AUTO=1``, a fresh cache directory) loads every
bucket it meets from the cache; what it still compiles is torchax's own start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.prefill.prefill_support import env, run_prefill
from tests.support.auto_jobs import ROOT, last_json, run_python
from tests.support.needs import require_module
from tests.support.server import LiveServer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLE = ROOT / "docs" / "examples" / "fuse_torchax.py"


def test_the_fuse_step_prefilled_through_torchax(
    hook_python: Path, live_server: LiveServer, tmp_path: Path
) -> None:
    require_module("torchax", "torchax is not installed (scripts/test installs torchax 0.0.7)")
    specs = tmp_path / "buckets.json"
    subprocess.run(
        [sys.executable, str(EXAMPLE), "--write-specs", str(specs)],
        env=env(),
        cwd=ROOT,
        check=True,
        timeout=120,
    )
    assert len(json.loads(specs.read_text())["calls"]) == 9
    code, summary, stderr = run_prefill(live_server, specs, "--framework", "torchax", "--unverified")
    assert code == 0, stderr[-3000:]
    assert (summary["compiled"], summary["failed"]) == (9, [])

    job_env = env(XLA_CACHE_AUTO="1", XLA_CACHE_SERVER=live_server.url, XLA_CACHE_DIR=str(tmp_path / "job"))
    ran = last_json(run_python(hook_python, [str(EXAMPLE), "--steps", "12"], job_env))
    assert ran["buckets"] >= 5 and ran["hits"] == ran["buckets"]  # every bucket met: loaded, not compiled
    assert ran["misses"] <= 2  # torchax's own start (its random seed), not the step
