"""Run reports of real JAX jobs: a first run reports each compile with its module and JAX's cache-key
components, a second run in another directory reports hits and no compile, and a job killed with SIGKILL
leaves what its periodic reports carried.

The jobs warm from a real server app whose run routes are the test receiver's
(:mod:`tests.support.run_receiver`): every report is checked against the wire contract and kept whole.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cache_protocol.runs import COMPONENT_NAMES
from tests.support.jax_jobs import JOB, jax_env, run_jax_job
from tests.support.run_receiver import RunReceiver, receiving_server
from tests.support.wait import wait_until
from xla_cache.cli import main

SHAPES = 3


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, RunReceiver]]:
    with receiving_server(tmp_path_factory.mktemp("jax-runs")) as (url, taken):
        yield url, taken
        assert taken.refused == [], taken.refused


def entries(directory: str | Path) -> list[str]:
    return sorted(p.name for p in Path(directory).iterdir() if p.name.endswith("-cache"))


def test_a_first_run_reports_its_compiles_and_a_second_its_hits(
    receiver: tuple[str, RunReceiver], tmp_path: Path
) -> None:
    url, taken = receiver
    first, log = run_jax_job(["--server", url, "--cache-dir", str(tmp_path / "A"), "--shapes", str(SHAPES)])
    run_id = first["warm"]["run_id"]
    last = taken.reports_of(run_id)[-1]
    assert last["framework"] == "jax" and last["namespace"] == first["warm"]["namespace"]
    assert (last["hits"], last["misses"], last["uploaded_entries"]) == (0, SHAPES, SHAPES)
    assert last["compile_seconds"] > 0 and last["ended_at"] is not None
    misses = taken.misses_of(run_id)
    assert sorted(m["key"] for m in misses) == entries(first["warm"]["cache_dir"])
    assert {m["module"] for m in misses} == {"jit_step"}
    for miss in misses:
        assert set(miss["components"]) == set(COMPONENT_NAMES) and miss["compile_seconds"] > 0
    # one graph at three shapes: only the computation's hash differs between the keys
    for name in COMPONENT_NAMES:
        assert len({m["components"][name] for m in misses}) == (SHAPES if name == "computation" else 1)
    assert first["run"]["run_id"] == run_id and len(first["run"]["missed_keys"]) == SHAPES
    assert "get_cache_key" not in log  # the DEBUG lines read for the components stay out of the job's log

    second, _ = run_jax_job(["--server", url, "--cache-dir", str(tmp_path / "B"), "--shapes", str(SHAPES)])
    again = taken.reports_of(second["warm"]["run_id"])
    assert (again[-1]["hits"], again[-1]["misses"], again[-1]["compile_seconds"]) == (SHAPES, 0, 0.0)
    assert again[-1]["warm_entries"] == SHAPES and taken.misses_of(second["warm"]["run_id"]) == []


def test_a_killed_job_keeps_what_its_periodic_reports_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server of its own: the job must compile, not load what the other test stored."""
    args = ["--server", "URL", "--cache-dir", str(tmp_path / "K"), "--shapes", "2", "--then-wait"]
    with receiving_server(tmp_path / "server") as (url, taken):
        with subprocess.Popen(
            [sys.executable, str(JOB), *[url if a == "URL" else a for a in args]],
            env=jax_env({"XLA_CACHE_REPORT_INTERVAL": "1"}),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ) as job:
            try:
                assert job.stdout is not None and job.stdout.readline().strip() == "COMPILED"

                def reported() -> str | None:
                    runs = taken.runs()
                    return runs[0] if runs and len(taken.misses_of(runs[0])) == 2 else None

                run_id = wait_until(reported, timeout=60, message="no report carried the job's compiles")
            finally:
                job.send_signal(signal.SIGKILL)
                job.wait(timeout=30)
        assert job.returncode == -signal.SIGKILL
        reports = taken.reports_of(run_id)
        assert all(r["ended_at"] is None for r in reports)  # it never reached its exit
        assert reports[-1]["misses"] == 2 and reports[-1]["compile_seconds"] > 0
        (directory,) = [p for p in (tmp_path / "K").iterdir() if p.is_dir()]
        assert sorted(m["key"] for m in taken.misses_of(run_id)) == entries(directory)

        assert main(["runs", "--server", url, run_id, "--json"]) == 0
        detail = json.loads(capsys.readouterr().out)
        assert detail["misses_total"] == 2 and detail["ended_at"] is None
        assert taken.refused == []
