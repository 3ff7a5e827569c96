"""Parsing stored entries' graphs in a child process, so that the parsing never holds the server's GIL.

Parsing an HLO module is Python work: about a millisecond and a half per entry, holding the GIL throughout.
On a thread of the server that made every request thread wait for the GIL after each system call: after a push
of 14,000 entries, the next 20 s of single GETs ran at half their speed. So the server's
:class:`~cache_server.parsing.service.ParsingService` hands the parsing to one child process (started when
there is first something to parse, at nice +10 where the system allows it), which opens the blobs through its
own handle on the same store (built from the same storage URL) and sends back only what it found; the indexer
records it. A batch the child cannot finish (it dies, or takes longer than :data:`BATCH_SECONDS`) is never
parsed in the server's process: the indexer parses its entries again one at a time with :data:`ENTRY_SECONDS`
each (a fresh child after each that fails), and the entry that kills or stalls one is recorded as unparseable.
If a child cannot be started at all, nothing is parsed for :data:`RETRY_SECONDS` (no new interpreter per
batch). The child exits when the server process that started it is gone; stopping the server kills it,
mid-batch or not.

One writer's entries cannot take the child over: it caps its own memory (``RLIMIT_DATA``, the setting
``XLA_CACHE_PARSER_MEMORY_MB``; an entry that needs more is recorded as unparseable with
:func:`memory_reason`, and the child goes on with the next), stops an entry after :data:`ENTRY_CPU_SECONDS`
of CPU (unparseable too, :func:`slow_reason`), and answers a batch with what it parsed once it has worked
on it for :data:`SLICE_SECONDS`: the service hands the rest back to its backlog, where other namespaces'
entries take their turn first.

The child imports only the parser and the storage backends (no web framework, no database).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import os
import resource
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from cache_server.errors import CacheError
from cache_server.parsing.hlo import GraphInfo, ParsedEntry, read_entry
from cache_server.storage import BlobStore, blob_name, open_store
from cache_server.storage.abilities import ReadsWhole

__all__ = [
    "CHILD_NICENESS",
    "ENTRY_CPU_SECONDS",
    "ENTRY_SECONDS",
    "RETRY_SECONDS",
    "SLICE_SECONDS",
    "WHOLE_READ_BYTES",
    "ChildFailed",
    "ChildNotStarted",
    "ParseOutcome",
    "ParserProcess",
    "ParserResting",
    "memory_reason",
    "parse_blob",
    "slow_reason",
]

log = logging.getLogger(__name__)
CHILD_NICENESS = 10  # added to the child's nice value: its CPU goes to requests first
BATCH_SECONDS = 120.0  # a batch not parsed in this long is parsed again an entry at a time ...
ENTRY_SECONDS = 20.0  # ... each in a fresh child, in this long at most (or it is recorded as unparseable)
START_SECONDS = 120.0  # a child not ready in this long is not started
RETRY_SECONDS = 60.0  # after a child could not be started, no new one is tried for this long
PARENT_CHECK_SECONDS = 2.0  # how often the child looks whether the process that started it is still there
MEMORY_MB = 512  # the child's memory cap by default (XLA_CACHE_PARSER_MEMORY_MB)
SLICE_SECONDS = 1.0  # a batch is answered with what is parsed once the child has worked on it this long
ENTRY_CPU_SECONDS = 10.0  # CPU seconds of the child one entry may take (a module at every bound: ~2 s)
WHOLE_READ_BYTES = 8 * 1024 * 1024  # an entry up to this size is read whole, in one request (parse_blob)


def memory_reason(cap_mb: int) -> str:
    """Why an entry that needed more than the child's memory cap is unparseable."""
    return f"the parser ran out of its memory cap ({cap_mb} MiB)"


def slow_reason(seconds: float = ENTRY_CPU_SECONDS) -> str:
    """Why an entry that took more than ``seconds`` of the child's CPU is unparseable."""
    return f"the parser took more than {seconds:g} s of CPU on it"


class _TooSlow(Exception):
    """The entry being parsed took its :data:`ENTRY_CPU_SECONDS` (raised by the child's CPU timer)."""


class ParserResting(RuntimeError):
    """The child is not used now (closed, or one could not be started a moment ago): parse later."""


@dataclass(frozen=True)
class ParseOutcome:
    """What parsing one entry found: its graph, None (no blob, or not an executable), why it is not
    parseable (``unparseable``: recorded as such, never parsed again), or why it could not be read now
    (``error``: a storage failure, left for a later catch-up)."""

    info: GraphInfo | None = None
    error: str | None = None
    unparseable: str | None = None
    why: str | None = None  # with no info: why the entry holds no graph this parser reads


def parse_blob(store: BlobStore, namespace: str, key: str) -> ParsedEntry:
    """The graph of one stored entry, or None and why not (no blob, or no graph this parser reads).

    An entry of at most :data:`WHOLE_READ_BYTES` is read whole where the store :class:`ReadsWhole`: one
    request on GCS, where opening it costs two (its metadata, then its bytes), and one ``pread`` on a local
    store; right after a push the child reads every new entry, beside the next warm's requests. A larger one
    is streamed (the parser reads at most a bounded prefix of it: :func:`read_entry`)."""
    name = blob_name(namespace, key)
    reader = store.read_whole(name, WHOLE_READ_BYTES) if isinstance(store, ReadsWhole) else store.open(name)
    if reader is None:
        return ParsedEntry(None, "no blob in the store")
    with reader:
        return read_entry(reader.chunks())


class ChildFailed(RuntimeError):
    """The child could not do a batch: it did not start, died, or took longer than its deadline."""


class ChildNotStarted(ChildFailed):
    """No child could be started (or it could not open the store): nothing is parsed for a while."""


@dataclass(frozen=True)
class _Limits:
    """What the child holds itself to (see the module docstring)."""

    memory_mb: int
    entry_cpu_seconds: float
    slice_seconds: float


def _child_main(
    connection: Connection, storage_url: str, timeout: float, retries: int, limits: _Limits
) -> None:
    """The child: lower its priority, open the store, cap its memory, then parse each batch it is sent until
    the pipe closes. It answers ``("ready", None)`` or ``("failed", why)`` once, then a list of outcomes per
    batch (of its first entries only, when the batch took longer than its slice)."""
    with contextlib.suppress(OSError, AttributeError):  # not allowed, or no os.nice on this system
        os.nice(CHILD_NICENESS)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    try:
        store = open_store(storage_url, timeout=timeout, retries=retries)
    except Exception as exc:
        connection.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    _cap_memory(limits.memory_mb)
    signal.signal(signal.SIGVTALRM, _too_slow)
    connection.send(("ready", None))
    while True:
        try:
            items: list[tuple[str, str]] = connection.recv()
            connection.send(_parse_all(store, items, limits))
        except (EOFError, OSError):  # the server closed its end, or is gone: nothing more to parse
            return


def _cap_memory(megabytes: int) -> None:
    """Cap the child's data (heap and private mappings, where Python's objects live): past it an allocation
    raises MemoryError, which :func:`_parse_all` records as the entry's reason. Never above a hard limit
    already set; a system without the limit runs uncapped."""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        cap = megabytes * 1024 * 1024
        soft = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _too_slow(signum: int, frame: object) -> None:
    raise _TooSlow


def _exit_with_parent(parent: int) -> None:
    """A server worker killed outright (SIGKILL) cannot stop its child: the child sees that and exits."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(0)


def _parse_all(store: BlobStore, items: list[tuple[str, str]], limits: _Limits) -> list[ParseOutcome]:
    """The outcomes of the first entries of ``items``: all of them, or as many as were parsed once the batch
    has taken :attr:`_Limits.slice_seconds` (at least one)."""
    outcomes: list[ParseOutcome] = []
    started = time.monotonic()
    for namespace, key in items:
        if outcomes and time.monotonic() - started >= limits.slice_seconds:
            break  # the rest go back to the service's backlog, behind other namespaces' entries
        outcomes.append(_parse_one(store, namespace, key, limits))
    return outcomes


def _parse_one(store: BlobStore, namespace: str, key: str, limits: _Limits) -> ParseOutcome:
    """One entry's outcome, within the child's memory cap and :attr:`_Limits.entry_cpu_seconds` of CPU
    (counted by the kernel: a wait on the store or for the CPU is not counted)."""
    try:
        signal.setitimer(signal.ITIMER_VIRTUAL, limits.entry_cpu_seconds)
        try:
            parsed = parse_blob(store, namespace, key)
        finally:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        return ParseOutcome(info=parsed.info, why=parsed.why)
    except CacheError as exc:  # the store failed: the indexer leaves the entry for a later catch-up
        return ParseOutcome(error=f"{type(exc).__name__}: {exc}")
    except MemoryError:
        outcome = ParseOutcome(unparseable=memory_reason(limits.memory_mb))
    except _TooSlow:
        return ParseOutcome(unparseable=slow_reason(limits.entry_cpu_seconds))
    except Exception as exc:  # the parser's own failure (a bound it missed): never parsed again
        return ParseOutcome(unparseable=f"{type(exc).__name__}: {exc}"[:500])
    gc.collect()  # what the entry's parse held is gone with its frames: hand it back before the next
    return outcome


@dataclass
class _Child:
    process: BaseProcess
    connection: Connection


class ParserProcess:
    """One child process that parses entries of the store at ``storage_url`` (see the module docstring)."""

    def __init__(
        self, storage_url: str, *, timeout: float = 30.0, retries: int = 5, memory_mb: int = MEMORY_MB
    ) -> None:
        """``memory_mb``: the child's memory cap (``XLA_CACHE_PARSER_MEMORY_MB``)."""
        limits = _Limits(memory_mb, ENTRY_CPU_SECONDS, SLICE_SECONDS)
        self._args = (storage_url, timeout, retries, limits)
        self._lock = threading.Lock()  # guards the fields below
        self._calls = threading.Lock()  # one batch in the pipe at a time
        self._child: _Child | None = None
        self._closed = False
        self._failed_at: float | None = None

    def parse(self, items: list[tuple[str, str]], *, seconds: float | None = None) -> list[ParseOutcome]:
        """The outcomes of the first entries, in order, within ``seconds`` (:data:`BATCH_SECONDS`): all of
        them, or fewer (at least one) when the batch took the child more than :data:`SLICE_SECONDS`. Raises
        :class:`ChildFailed` when the child died or was too slow (it is killed; the next call starts a
        fresh one), :class:`ChildNotStarted` or :class:`ParserResting` when none runs. Never parses here."""
        with self._calls:
            child = self._started()
            try:
                try:
                    child.connection.send(items)
                except OSError as exc:  # it died while it waited for work
                    raise ChildFailed(f"the parser process ended (exit code {_exit_code(child)})") from exc
                outcomes: list[ParseOutcome] = self._answer(
                    child, "parse the batch", BATCH_SECONDS if seconds is None else seconds
                )
                return outcomes
            except BaseException:
                self._discard(child)  # a broken or stuck child: the next call starts a fresh one
                raise

    def child_pid(self) -> int | None:
        """The child's process id, once it runs (for tests and diagnosis)."""
        with self._lock:
            return self._child.process.pid if self._child is not None else None

    def close(self) -> None:
        """Kill the child (a batch it is parsing is abandoned: the indexer records nothing more)."""
        with self._lock:
            self._closed = True
            child = self._child
        if child is not None:
            self._discard(child)

    @staticmethod
    def _answer(child: _Child, what: str, seconds: float) -> Any:
        try:
            if not child.connection.poll(seconds):
                raise ChildFailed(f"the parser process did not {what} within {seconds:g} s")
            return child.connection.recv()
        except (EOFError, OSError) as exc:
            raise ChildFailed(f"the parser process ended (exit code {_exit_code(child)})") from exc

    def _started(self) -> _Child:
        with self._lock:
            if self._closed:
                raise ParserResting("the parser process is closed")
            if self._failed_at is not None and time.monotonic() - self._failed_at < RETRY_SECONDS:
                raise ParserResting(f"the parser process failed less than {RETRY_SECONDS:g} s ago")
            if self._child is not None:
                return self._child
            try:
                child = self._child = self._spawn()
            except BaseException:
                self._failed_at = time.monotonic()  # could not even start one: rest as after a failure
                raise
        try:
            state, why = self._answer(child, "start", START_SECONDS)
            if state != "ready":
                raise ChildNotStarted(f"the parser process could not open the store: {why}")
        except ChildNotStarted:
            self._failed(child)
            raise
        except BaseException as exc:
            self._failed(child)
            if isinstance(exc, ChildFailed):
                raise ChildNotStarted(str(exc)) from exc
            raise
        return child

    def _spawn(self) -> _Child:
        context = multiprocessing.get_context("spawn")  # never fork a threaded server
        ours, theirs = context.Pipe()
        try:
            process = context.Process(
                target=_child_main, args=(theirs, *self._args), name="xla-cache-parser", daemon=True
            )
            process.start()
        except BaseException as exc:
            ours.close()
            theirs.close()
            if isinstance(exc, Exception):
                raise ChildNotStarted(f"the parser process could not be started ({exc!r})") from exc
            raise
        theirs.close()  # the child holds its end: when it dies, reading ours fails at once
        return _Child(process, ours)

    def _failed(self, child: _Child) -> None:
        """A child that could not start: rest :data:`RETRY_SECONDS` before the next."""
        with self._lock:
            self._failed_at = time.monotonic()
        self._discard(child)

    def _discard(self, child: _Child) -> None:
        """Kill the child and wait for it, then close our end of the pipe: a thread waiting on the pipe
        wakes at the child's end, never on a descriptor closed (and perhaps reused) under it."""
        with self._lock:
            if self._child is child:
                self._child = None
        with contextlib.suppress(Exception):
            child.process.kill()
        with contextlib.suppress(Exception):
            child.process.join(5)
        with contextlib.suppress(Exception):
            child.connection.close()
        with contextlib.suppress(Exception):
            child.process.close()  # its sentinel descriptor now, not at garbage collection


def _exit_code(child: _Child) -> int | None:
    try:
        return child.process.exitcode
    except ValueError:  # closed by another thread's discard meanwhile
        return None
