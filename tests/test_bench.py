"""Smoke test of ``python -m bench``: two fast cases run at quick size and write medians (no speed is
asserted: the figures belong in BENCHMARKS.md, not in a test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ("tar-floor", "get-single")


def test_quick_bench_writes_medians(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    command = [sys.executable, "-m", "bench", "--quick", "--only", ",".join(CASES), "--json", str(out)]
    command += ["--scratch", str(tmp_path / "scratch")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert figures["quick"] is True and figures["reps"] == 3
    assert set(figures["cases"]) == set(CASES)
    for name in CASES:
        case = figures["cases"][name]
        assert case["error"] is None, case
        assert case["series"], name
        for series in case["series"].values():
            assert len(series["seconds"]) == 3
            assert series["median_s"] > 0
            assert series["min_s"] <= series["median_s"] <= series["max_s"]
            assert series["rates"], series
    assert "median" in done.stdout and "tar c | tar x" in done.stdout
    assert not (tmp_path / "scratch").exists()  # the scratch directory is removed
