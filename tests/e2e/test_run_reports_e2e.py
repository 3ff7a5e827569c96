"""Run reports of real torch_xla 2.7 jobs: a first run reports its compiles (torch_xla's counters and its
CompileTime metric) and the keys they wrote; a second run in another directory reports only hits.

The jobs warm from a real server app whose run routes are the test receiver's
(:mod:`tests.support.run_receiver`): every report is checked against the wire contract and kept whole.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.run_receiver import receiving_server
from tests.support.torch_xla_jobs import run_job

pytestmark = pytest.mark.e2e

SHAPES = 3


def test_a_run_reports_its_compiles_and_the_next_its_hits(tmp_path: Path) -> None:
    with receiving_server(tmp_path / "server") as (url, taken):
        first = run_job(["--server", url, "--cache-dir", str(tmp_path / "A"), "--shapes", str(SHAPES)])
        run_id = first.warm["run_id"]
        last = taken.reports_of(run_id)[-1]
        assert last["framework"] == "torch_xla" and last["namespace"] == first.warm["namespace"]
        assert last["misses"] == first.counters["UncachedCompile"] == SHAPES
        assert last["hits"] == first.counters["PersistentCacheHit"] == 0
        assert last["uploaded_entries"] == SHAPES and last["ended_at"] is not None
        misses = taken.misses_of(run_id)
        directory = Path(first.warm["cache_dir"])
        written = sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))
        assert sorted(m["key"] for m in misses) == written
        assert all(m["module"] is None and m["components"] is None for m in misses)  # opaque names
        # CompileTime: the run's total, and each compile's own sample where it was matched to its file
        timed = [m["compile_seconds"] for m in misses if m["compile_seconds"] is not None]
        assert timed and all(t > 0 for t in timed)
        assert last["compile_seconds"] >= sum(timed) * 0.99

        second = run_job(["--server", url, "--cache-dir", str(tmp_path / "B"), "--shapes", str(SHAPES)])
        again = taken.reports_of(second.warm["run_id"])[-1]
        assert (again["hits"], again["misses"], again["compile_seconds"]) == (SHAPES, 0, 0.0)
        assert again["warm_entries"] == SHAPES and taken.misses_of(second.warm["run_id"]) == []
        assert taken.refused == []
