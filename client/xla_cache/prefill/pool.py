"""The prefill's worker processes: at most ``workers`` at once, each started with ``spawn``, each killed
when its resident memory passes ``memory_mib`` or one call runs past ``call_timeout`` seconds, and each
replaced by a fresh one after ``calls_per_worker`` calls (XLA's memory only grows within a process).

:class:`WorkerPool` hands calls out and yields what comes back, one event at a time; what a worker says is
:mod:`xla_cache.prefill.worker`'s conversation.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from xla_cache.prefill.worker import WorkerSetup, worker_main

__all__ = ["Event", "WorkerPool", "rss_mib"]

_POLL = 0.25  # seconds between memory and time checks while waiting


def rss_mib(pid: int) -> float:
    """A process's resident memory in MiB (0 when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class _Slot:
    number: int
    process: Any  # multiprocessing.Process (spawn context)
    conn: Connection
    state: str = "starting"  # starting -> (facts) -> setting up -> ready <-> busy; or gone
    call: int | None = None
    since: float = 0.0
    calls: int = 0
    killed: str | None = None  # why the pool killed it
    peak_mib: float = 0.0


@dataclass(frozen=True)
class Event:
    """What happened: ``facts`` (a worker described its target: ``facts``, ``components``), ``done`` (call
    ``index`` ended: ``result``), ``failed`` (call ``index`` lost with its worker: ``reason``) or ``error``
    (a worker could not start: ``reason``)."""

    kind: str
    index: int | None = None
    result: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    facts: dict[str, Any] | None = None
    components: dict[str, Any] | None = None


class WorkerPool:
    """Worker processes compiling the calls of one prefill (see the module's doc)."""

    def __init__(
        self,
        setup: WorkerSetup,
        *,
        workers: int,
        memory_mib: float | None,
        call_timeout: float | None,
        calls_per_worker: int,
        scratch: Path,
    ) -> None:
        self.setup = setup
        self.workers = max(1, workers)
        self.memory_mib = memory_mib
        self.call_timeout = call_timeout
        self.calls_per_worker = max(1, calls_per_worker)
        self.scratch = scratch
        self.peak_mib = 0.0
        self.started = 0
        self._context = multiprocessing.get_context("spawn")
        self._slots: list[_Slot] = []
        self._numbers = iter(range(1 << 30))
        self._setup: tuple[str, frozenset[str]] | None = None  # (namespace, stored keys) once known
        self.pending: deque[tuple[int, list[Any]]] = deque()

    # -- workers --------------------------------------------------------------------------------------
    def _start(self) -> None:
        ours, theirs = self._context.Pipe()
        number = next(self._numbers)
        process = self._context.Process(
            target=worker_main, args=(theirs, self.setup), name=f"xla-cache-prefill-{number}", daemon=True
        )
        process.start()
        theirs.close()
        self.started += 1
        self._slots.append(_Slot(number, process, ours, since=time.monotonic()))

    def configure(self, namespace: str, stored: frozenset[str]) -> None:
        """The namespace (its scratch directories) and the keys it holds: every worker is set up with them,
        those waiting now and those started later."""
        self._setup = (namespace, stored)
        for slot in self._slots:
            if slot.state == "facts":
                self._send_setup(slot)

    def _send_setup(self, slot: _Slot) -> None:
        assert self._setup is not None
        namespace, stored = self._setup
        directory = self.scratch / f"worker-{slot.number}" / namespace
        slot.conn.send(("setup", str(directory), sorted(stored)))
        slot.state = "setting up"

    def start_first(self) -> None:
        """Start one worker: its facts name the namespace before the others start."""
        self._start()

    def _fill(self) -> None:
        """Start workers up to the bound while calls wait (after the namespace is known)."""
        if self._setup is None:
            return
        live = [s for s in self._slots if s.state != "gone"]
        idle = sum(1 for s in live if s.state in ("starting", "facts", "setting up", "ready"))
        while len(live) < self.workers and len(self.pending) > idle:
            self._start()
            live.append(self._slots[-1])
            idle += 1

    def _dispatch(self, slot: _Slot) -> None:
        if slot.calls >= self.calls_per_worker:
            self._retire(slot)
            return
        if not self.pending:
            return
        index, call = self.pending.popleft()
        slot.conn.send(("call", index, call))
        slot.state, slot.call, slot.since = "busy", index, time.monotonic()
        slot.calls += 1

    def _retire(self, slot: _Slot) -> None:
        with contextlib.suppress(OSError):
            slot.conn.send(None)
        slot.process.join(timeout=30)
        if slot.process.is_alive():
            slot.process.kill()
            slot.process.join()
        self._gone(slot)

    def _gone(self, slot: _Slot) -> None:
        slot.state = "gone"
        slot.conn.close()
        self._slots.remove(slot)

    def _kill(self, slot: _Slot, why: str) -> None:
        slot.killed = why
        slot.process.kill()

    # -- the loop ---------------------------------------------------------------------------------------
    def events(self) -> Iterator[Event]:
        """Run until every pending call is done and no worker is busy; yield each event."""
        while True:
            self._fill()
            live = [s for s in self._slots if s.state != "gone"]
            if not live:
                if self.pending and self._setup is None:
                    return  # the first worker died before it said anything: the caller was told
                if not self.pending:
                    return
                self._start()
                continue
            if not self.pending and all(s.state in ("ready",) for s in live) and self._setup is not None:
                for slot in list(live):
                    self._retire(slot)
                return
            by_handle: dict[Any, tuple[str, _Slot]] = {}
            for slot in live:
                by_handle[slot.conn] = ("conn", slot)
                by_handle[slot.process.sentinel] = ("exit", slot)
            for handle in wait(list(by_handle), timeout=_POLL):
                what, slot = by_handle[handle]
                if slot.state == "gone":
                    continue
                if what == "conn":
                    yield from self._receive(slot)
                else:
                    yield from self._exited(slot)
            self._watch()

    def _receive(self, slot: _Slot) -> Iterator[Event]:
        try:
            message = slot.conn.recv()
        except (EOFError, OSError):
            yield from self._exited(slot)
            return
        kind = message[0]
        if kind == "facts":
            slot.state = "facts"
            yield Event("facts", facts=message[1], components=message[2])
            if self._setup is not None and slot.state == "facts":  # (configure may have sent it)
                self._send_setup(slot)
        elif kind == "ready":
            slot.state = "ready"
            self._dispatch(slot)
        elif kind == "done":
            index, result = message[1], message[2]
            slot.state, slot.call = "ready", None
            yield Event("done", index=index, result=result)
            self._dispatch(slot)
        elif kind == "error":
            yield Event("error", reason=message[1])
            self._retire(slot)

    def _exited(self, slot: _Slot) -> Iterator[Event]:
        slot.process.join(timeout=5)
        code = slot.process.exitcode
        call = slot.call
        self._gone(slot)
        if call is not None:
            why = slot.killed or (
                f"its worker died (signal {-code})"
                if code is not None and code < 0
                else f"its worker exited ({code})"
            )
            yield Event("failed", index=call, reason=why)
        elif slot.state in ("starting", "facts", "setting up"):
            yield Event("error", reason=slot.killed or f"a worker ended before it was ready (exit {code})")

    def _watch(self) -> None:
        now = time.monotonic()
        for slot in self._slots:
            if slot.state == "gone" or slot.killed:
                continue
            mib = rss_mib(slot.process.pid)
            slot.peak_mib = max(slot.peak_mib, mib)
            self.peak_mib = max(self.peak_mib, mib)
            if self.memory_mib is not None and mib > self.memory_mib:
                self._kill(slot, f"its worker went over {self.memory_mib:g} MiB ({mib:.0f} MiB)")
            elif (
                slot.state == "busy"
                and self.call_timeout is not None
                and now - slot.since > self.call_timeout
            ):
                self._kill(slot, f"it compiled for over {self.call_timeout:g} s")

    def close(self) -> None:
        """Stop every worker now."""
        for slot in list(self._slots):
            if slot.process.is_alive():
                slot.process.kill()
            slot.process.join(timeout=5)
            self._gone(slot)

    def each_live(self, action: Callable[[int], None]) -> None:
        """``action(pid)`` for each live worker (tests, and the memory figure)."""
        for slot in self._slots:
            if slot.process.is_alive():
                action(slot.process.pid)


def cpu_count() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
