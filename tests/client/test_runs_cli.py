"""``xla-cache runs``: the run listing and one run's compiles, read from the server's admin routes (here the
test receiver's, in the server's shapes)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.support.run_receiver import RunReceiver, no_run_routes
from tests.support.run_reports import run_report
from tests.support.threaded_server import serve_in_thread
from xla_cache.cli import main
from xla_cache.cli.runs import since_of
from xla_cache.http.api import CacheApi
from xla_cache.http.deadline import Deadline

HEX = "ab" * 32


@pytest.fixture
def server() -> Iterator[str]:
    """A receiver holding two runs: a JAX one that compiled, a torch_xla one that hit."""
    with serve_in_thread(RunReceiver()) as url:
        api = CacheApi(url)
        try:
            miss = {"key": f"jit_step-{HEX}-cache", "module": "jit_step", "compile_seconds": 2.5}
            first = run_report(
                "a1" * 16,
                namespace="cpu-jax-ns",
                framework="jax",
                host="tpu-vm-3",
                misses=1,
                compile_seconds=2.5,
                new_misses=[miss],
            )
            api.post_run(first, Deadline(10))
            api.post_run({**first, "new_misses": [], "ended_at": time.time()}, Deadline(10))
            second = run_report(
                "b2" * 16,
                namespace="cpu-torch_xla-ns",
                host="tpu-vm-3",
                process_index=3,
                hits=40,
                warm_entries=40,
            )
            api.post_run(second, Deadline(10))
        finally:
            api.close()
        yield url


def test_runs_lists_the_newest_first_with_hit_rate_and_state(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "--server", server]) == 0
    header, newest, oldest = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["RUN", "STARTED", "(UTC)", "FRAMEWORK"]
    assert newest.startswith("b2b2b2b2b2b2") and "torch_xla" in newest and "100.0%" in newest
    assert "running" in newest and "cpu-torch_xla-ns" in newest
    assert newest.split()[4:7] == ["tpu-vm-3", "3", "40"]  # host, process, hits
    assert oldest.split()[3:10] == ["jax", "tpu-vm-3", "0", "0", "1", "0.0%", "2.50"] and "ended" in oldest


def test_runs_filters_and_prints_json(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--server", server, "--framework", "jax", "--since", "1h", "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["run_id"] == "a1" * 16 and run["misses"] == 1


def test_one_run_lists_its_compiles(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--server", server, "a1" * 16]) == 0
    out = capsys.readouterr().out
    assert "framework    jax on tpu-vm-3 (process 0)" in out
    assert "compiles     1; 2.50 s paid" in out
    (line,) = [line for line in out.splitlines() if line.startswith("  jit_step")]
    assert f"jit_step-{HEX}"[:24] in line and "unknown" in line and "2.50 s" in line


def test_a_server_without_run_reports_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    with serve_in_thread(no_run_routes) as url:
        assert main(["runs", "--server", url]) == 2
    assert "keeps no run reports" in capsys.readouterr().err


def test_since_takes_a_time_or_a_duration() -> None:
    import datetime as dt

    now = dt.datetime(2026, 12, 3, 9, 0, tzinfo=dt.timezone.utc)
    assert since_of("2h", now) == "2026-12-03T07:00:00+00:00"
    assert since_of("2026-12-01T08:00") == "2026-12-01T08:00:00"
    with pytest.raises(Exception, match="not a time"):
        since_of("yesterday")
