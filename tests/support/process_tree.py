"""A process and everything it started, read from ``/proc`` (Linux): list it, kill it at once, weigh it.

``xla-cache-server serve --workers N`` is a supervisor with N worker processes (and multiprocessing's helper
processes). A crash test must take them all down at one instant, as a power cut or the kernel's OOM killer
would, without the supervisor noticing a dead worker and starting another:

    killed = kill_tree(server.pid)   # SIGSTOP to every process first, then SIGKILL to every one

and a memory test weighs the whole tree:

    rss_bytes(tree(server.pid))      # the sum of VmRSS over the supervisor and its workers

and a cost test weighs one request by the CPU its serving process spent (``cpu_seconds`` before and after).

The processes need not be in a process group of their own (``run_server`` starts the server in the test's),
so the tree is found by parent ids, not by ``killpg``.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

__all__ = ["cpu_seconds", "kill_tree", "peak_rss_mib", "reset_peak_rss", "rss_bytes", "tree"]

_PROC = Path("/proc")


def _parents() -> dict[int, int]:
    """Every live process's parent id, by process id."""
    parents: dict[int, int] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone between the listing and the read
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ")".
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def tree(pid: int) -> list[int]:
    """``pid`` and all its live descendants, parents before children (empty if ``pid`` is gone)."""
    parents = _parents()
    if pid not in parents:
        return []
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found = [pid]
    for current in found:  # grows while it is walked: breadth first
        found.extend(sorted(children.get(current, [])))
    return found


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and every descendant at one instant; returns the process ids killed.

    Every process is stopped first (SIGSTOP, the supervisor before its workers, and again until no new
    child appears), so none of them runs another instruction, notices another's death or starts a
    replacement; then each gets SIGKILL. The caller reaps its own child (``Popen.wait``); the orphaned
    workers are reaped by init.
    """
    stopped: list[int] = []
    while True:
        fresh = [p for p in tree(pid) if p not in stopped]
        if not fresh:
            break
        for process in fresh:
            _signal(process, signal.SIGSTOP)
        stopped.extend(fresh)
    for process in stopped:
        _signal(process, signal.SIGKILL)
    return stopped


def rss_bytes(pids: list[int]) -> int:
    """The sum of the resident set sizes (VmRSS) of the processes still alive among ``pids``."""
    total = 0
    for pid in pids:
        try:
            status = (_PROC / str(pid) / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
                break
    return total


def peak_rss_mib(pid: int) -> float:
    """The peak resident set size of process ``pid`` so far (``VmHWM``), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def reset_peak_rss(pid: int) -> bool:
    """Reset process ``pid``'s ``VmHWM`` to its present RSS (``clear_refs``); False where that is refused."""
    try:
        (_PROC / str(pid) / "clear_refs").write_text("5")
    except OSError:
        return False
    return True


def cpu_seconds(pid: int) -> float:
    """The CPU seconds process ``pid`` has spent so far, in user and system mode (``utime + stime`` of
    ``/proc/PID/stat``; not its children's)."""
    stat = (_PROC / str(pid) / "stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # fields[0] is the state, the stat's third field
    ticks = int(fields[11]) + int(fields[12])  # the 14th and 15th fields
    return ticks / os.sysconf("SC_CLK_TCK")
