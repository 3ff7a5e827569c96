"""Parsing stored entries' graphs in a child process, so that the parsing never holds the server's GIL.

Parsing an HLO module is Python work: about a millisecond and a half per entry, holding the GIL throughout.
On a thread of the server that made every request thread wait for the GIL after each system call: after a
push of 14,000 entries, the next 20 s of single GETs ran at half their speed. So the server's
:class:`~cache_server.admin.graphs.GraphIndexer` hands the parsing to one child process (started when there
is first something to parse, at a lower CPU priority), which opens the blobs through its own handle on the
same store (built from the same storage URL) and sends back only what it found; the indexer records it. If
the child cannot be started or dies, that batch is parsed on the indexer's thread as before.

The child imports only the parser and the storage backends (no web framework, no database).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import multiprocessing
import os
import threading
from dataclasses import dataclass

from cache_server.admin.hlo import GraphInfo, parse_entry
from cache_server.storage import BlobStore, blob_name, open_store

__all__ = ["CHILD_NICENESS", "ParseOutcome", "ParserProcess", "parse_blob"]

log = logging.getLogger(__name__)
CHILD_NICENESS = 10  # added to the child's nice value: its CPU goes to requests first
BATCH_SECONDS = 120.0  # a batch not parsed in this long is parsed on the indexer's thread instead


@dataclass(frozen=True)
class ParseOutcome:
    """What parsing one entry found: its graph, None (no blob, or not an executable), or why it failed."""

    info: GraphInfo | None = None
    error: str | None = None


def parse_blob(store: BlobStore, namespace: str, key: str) -> GraphInfo | None:
    """The graph of one stored entry; None when it has no blob, or no graph this parser reads."""
    reader = store.open(blob_name(namespace, key))
    if reader is None:
        return None
    with reader:
        return parse_entry(reader.chunks())


_child_store: BlobStore | None = None


def _start_child(storage_url: str, timeout: float, retries: int) -> None:
    global _child_store
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no os.nice on this system
        os.nice(CHILD_NICENESS)
    _child_store = open_store(storage_url, timeout=timeout, retries=retries)


def _parse_in_child(items: list[tuple[str, str]]) -> list[ParseOutcome]:
    assert _child_store is not None, "the child opens its store when it starts"
    outcomes: list[ParseOutcome] = []
    for namespace, key in items:
        try:
            outcomes.append(ParseOutcome(info=parse_blob(_child_store, namespace, key)))
        except Exception as exc:  # the indexer logs it and leaves the entry for a later catch-up
            outcomes.append(ParseOutcome(error=f"{type(exc).__name__}: {exc}"))
    return outcomes


class ParserProcess:
    """One child process that parses entries of the store at ``storage_url`` (see the module docstring)."""

    def __init__(self, storage_url: str, *, timeout: float = 30.0, retries: int = 5) -> None:
        self._args = (storage_url, timeout, retries)
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._closed = False

    def parse(self, items: list[tuple[str, str]]) -> list[ParseOutcome]:
        """Each entry's outcome, in order. Raises when the child could not do it (not started, died, too
        slow); the caller then parses them itself."""
        pool = self._started()
        try:
            return pool.submit(_parse_in_child, items).result(timeout=BATCH_SECONDS)
        except BaseException:
            self._discard(pool)  # a broken or stuck child: the next batch starts a new one
            raise

    def child_pid(self) -> int | None:
        """The child's process id, once it runs (for tests and diagnosis)."""
        with self._lock:
            processes = getattr(self._pool, "_processes", None) or {}
            return next(iter(processes), None)

    def close(self) -> None:
        """Stop the child (a batch it is parsing is abandoned)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _started(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("the parser process is closed")
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),  # never fork a threaded server
                    initializer=_start_child,
                    initargs=self._args,
                )
            return self._pool

    def _discard(self, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        for process in list(getattr(pool, "_processes", {}).values()):
            with contextlib.suppress(Exception):
                process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
