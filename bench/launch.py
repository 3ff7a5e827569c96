"""Processes the benchmark starts, and what it reads of them: a real ``xla-cache-server serve``, a static
file server, fake-gcs-server; their peak memory and CPU.

The launchers are those of the tests (:mod:`tests.support.server`, :mod:`tests.support.gcs_emulator`): one
copy, the one the tests trust. Each runs on a free loopback port, logs into a file, and is stopped
(SIGTERM, then SIGKILL) when its ``with`` block ends.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.support.process_tree import cpu_seconds
from tests.support.server import LiveServer
from tests.support.server import run_server as run_test_server

__all__ = [
    "LiveServer",
    "children_of",
    "own_cpu",
    "peak_rss_bytes",
    "process_cpu",
    "reset_peak_rss",
    "run_server",
    "run_static_server",
    "wait_quiet",
]


@contextmanager
def run_server(
    data_dir: Path,
    *,
    workers: int = 1,
    env: Mapping[str, str] | None = None,
    startup_timeout: float = 60.0,
) -> Iterator[LiveServer]:
    """``xla-cache-server serve`` on a free loopback port over ``data_dir`` (SQLite index, local blobs
    unless ``env`` says otherwise); auth off, so every route (admin too) is open to the benchmark."""
    from cache_server.settings import Settings  # imported when a case starts a server, not by every run

    # What a deployed server does, not what the tests want (they flush read times every 0.2 s).
    flush = Settings.model_fields["access_flush_seconds"].default
    settings = {
        "XLA_CACHE_LOG_LEVEL": "warning",
        "XLA_CACHE_ACCESS_FLUSH_SECONDS": str(flush),
        **(env or {}),
    }
    with run_test_server(data_dir, settings, workers=workers, startup_timeout=startup_timeout) as server:
        yield server


@contextmanager
def run_static_server(root: Path, log_dir: Path) -> Iterator[LiveServer]:
    """The sendfile static file server of :mod:`bench.static_server`, serving ``root``."""

    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "bench.static_server", str(root), str(port)]

    paths = [str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(filter(None, paths))}
    with run_test_server(log_dir, env, command=argv, ready_path="/") as server:
        yield server


def peak_rss_bytes(pid: int) -> int | None:
    """The process's peak resident set size (``VmHWM`` in ``/proc/<pid>/status``), or None if unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak_rss(pid: int) -> bool:
    """Reset the process's ``VmHWM`` to its current RSS (``echo 5 > /proc/<pid>/clear_refs``); False when
    not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (its own, not its children's); 0 once it is gone."""
    try:
        return cpu_seconds(pid)
    except OSError:
        return 0.0


def own_cpu() -> float:
    """User + system CPU seconds of this process so far (all its threads)."""
    times = os.times()
    return times.user + times.system


def children_of(pid: int) -> list[int]:
    """The direct children of ``pid`` (from ``/proc/<pid>/task/*/children``)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(p) for p in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def wait_quiet(pid: int, *, timeout: float = 120.0, idle_cpu: float = 0.02) -> bool:
    """Wait until process ``pid`` and its children used at most ``idle_cpu`` CPU seconds in a second: a
    server parses the graphs of what was just uploaded, on its child and its own threads, for a while after
    a large upload. False if ``timeout`` passed first."""
    time.sleep(0.5)  # the parsing starts just after the upload's answer
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        group = [pid, *children_of(pid)]
        before = sum(process_cpu(p) for p in group)
        time.sleep(1.0)
        if sum(process_cpu(p) for p in group) - before <= idle_cpu:
            return True
    return False
