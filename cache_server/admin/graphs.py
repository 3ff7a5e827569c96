"""Parsing stored entries in the background, so the stats can list graphs and their shape variants.

New entries are queued by the service right after they are stored; a background thread reads each one's
first bytes, parses its HLO module (:mod:`cache_server.admin.hlo`) and records what it found. Entries stored
while no queue was listening (another process, a restart, an overflowing queue) are found by a catch-up
scan at start. Nothing here runs on the download path.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable

from cache_server.admin.hlo import parse_entry
from cache_server.errors import CacheError
from cache_server.index.admin import AdminRepository, GraphRecord
from cache_server.storage.base import BlobStore, blob_name

__all__ = ["GraphIndexer"]

log = logging.getLogger(__name__)
CATCH_UP_BATCH = 200


class GraphIndexer:
    """Keeps ``entry_graphs`` filled in for every stored entry."""

    def __init__(self, repository: AdminRepository, store: BlobStore, *, queue_size: int = 10_000) -> None:
        self._repository = repository
        self._store = store
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue(maxsize=queue_size)
        self._catch_up_due = False  # a catch-up scan is asked for (counted in _pending from that moment)
        self._pending = 0  # queued and not yet parsed, plus one for a catch-up scan asked for or running
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()  # a catch-up scan ends between entries once set

    def notify(self, namespace: str, key: str) -> None:
        """Queue a newly stored entry (called on the upload path: never blocks, never raises)."""
        with self._changed:
            try:
                self._queue.put_nowait((namespace, key))
                self._pending += 1
            except queue.Full:
                self._request_catch_up()  # the catch-up scan will find it

    def parse(self, namespace: str, key: str) -> GraphRecord:
        """Parse one stored entry and record the result (an unparseable entry is recorded as such)."""
        reader = self._store.open(blob_name(namespace, key))
        info = None
        if reader is not None:
            with reader:
                info = parse_entry(reader.chunks())
        record = GraphRecord(namespace, key, module=None)
        if info is not None:
            record = GraphRecord(namespace, key, info.module, info.signature, info.shapes, info.source)
        self._repository.record_graph(record)
        return record

    def catch_up(self) -> int:
        """Parse every entry that has no record yet; returns how many were parsed."""
        done = 0
        while not self._stopping.is_set():
            batch = self._repository.unparsed_entries(CATCH_UP_BATCH)
            for namespace, key in batch:
                if self._stopping.is_set():
                    return done
                self.parse(namespace, key)
            done += len(batch)
            if len(batch) < CATCH_UP_BATCH:
                break
        return done

    def wait_idle(self, timeout: float) -> bool:
        """Wait until everything queued so far is parsed and no catch-up scan runs."""
        with self._changed:
            return self._changed.wait_for(lambda: self._pending == 0, timeout)

    def _request_catch_up(self) -> None:
        """Ask for a catch-up scan; the caller holds ``_changed``. Counted at once, so ``wait_idle`` waits."""
        if not self._catch_up_due:
            self._catch_up_due = True
            self._pending += 1

    def start(self) -> None:
        if self._thread is None:
            self._stopping.clear()
            with self._changed:
                self._request_catch_up()  # entries stored before this process started
            self._thread = threading.Thread(target=self._run, name="xla-cache-graphs", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()  # the store and the database are closed next: no parse may still run
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def _done(self, count: int) -> None:
        with self._changed:
            self._pending -= count
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                due, self._catch_up_due = self._catch_up_due, False
            if due:
                self._guarded(self.catch_up)
                self._done(1)
            try:
                item = self._queue.get(timeout=1.0)
            except queue.Empty:
                continue
            if item is None:
                return
            self._guarded(functools.partial(self.parse, *item))
            self._done(1)

    @staticmethod
    def _guarded(work: Callable[[], object]) -> None:
        try:
            work()
        except CacheError as exc:
            log.warning("graph parsing skipped: %s", exc.detail)
        except Exception:
            log.exception("graph parsing failed")
