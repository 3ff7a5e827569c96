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


def test_the_breakdown_runs_a_push_and_a_warm_and_times_their_parts(tmp_path: Path) -> None:
    """``python -m bench.breakdown`` at quick size: every part it names has a time, and the warm's steps
    come in order."""
    out = tmp_path / "parts.json"
    command = [sys.executable, "-m", "bench.breakdown", "--quick", "--reps", "1", "--json", str(out)]
    command += ["--scratch", str(tmp_path / "scratch")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert figures["data"].startswith("300 entries")
    assert figures["tar c | tar x"] > 0
    assert set(figures["client parts alone"]) == {
        "sha256 of every entry",
        "create, write, rename every file",
        "read the tar stream (64 kB pieces)",
    }
    assert all(seconds > 0 for seconds in figures["client parts alone"].values())
    assert set(figures["push"]) == {"wall", "client CPU", "server CPU", "parser CPU"}
    assert figures["push"]["wall"] > 0 and figures["push"]["server CPU"] > 0
    assert figures["warm"]["wall"] > 0 and figures["warm"]["server CPU"] > 0
    assert figures["push"]["parser CPU"] > 0  # the server's child parsed the real executables pushed
    steps = figures["warm steps ended at"]  # each step was reached, in this order
    assert list(steps) == [
        "registered",
        "manifest",
        "bundle answered",
        "bundle first byte",
        "bundle last byte",
    ]
    waits = figures["warm's waits for bundle pieces"]
    assert waits["pieces read"] >= 1 and waits["all waits"] > 0
    assert 0 <= waits["waits over 2 ms"] <= waits["all waits"]
    assert 0 <= waits["how many over 2 ms"] <= waits["pieces read"]
    bare = figures["bundle to a bare reader"]
    assert bare["wall"] > 0 and bare["server CPU"] > 0
    assert "warm steps ended at" in done.stdout and "bundle to a bare reader" in done.stdout
