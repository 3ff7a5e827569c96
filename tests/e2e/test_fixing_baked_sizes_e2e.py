"""docs/fixing-baked-sizes.md shows code that works: its example, run under torch_xla on the CPU over 12
random batches of 4 samples (edge sizes included), compiles the seed's ``fuse_embedding`` once per size
combination, each rewrite at most twice (the first step and the steady one), with the original's values."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.torch_xla_jobs import JOB_TIMEOUT, ROOT, job_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLE = ROOT / "docs" / "examples" / "fuse_embedding.py"


def test_the_docs_fixes_compile_once_and_give_the_same_rows() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "12", "--seed", "3"],
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["size_combinations"] == 12
    assert report["fuse_embedding"]["compiles"] == report["size_combinations"]
    for fix in ("fuse_gather", "fuse_masks"):
        assert 1 <= report[fix]["compiles"] <= 2, (fix, report)
        assert report[fix]["same_values"] is True, (fix, report)
