"""Parsing stored entries in the background, so the stats, the bucketing report and the miss reasons can read
each entry's graph: the parsing service.

Built once in :mod:`cache_server.wiring` over the index's ``GraphRepository``, started and stopped with the
other services. New entries are queued by the cache service right after they are stored (its ``on_stored``); a
background thread reads each one's first bytes, parses its HLO module (:mod:`cache_server.parsing.hlo`) and
records what it found. Entries stored while no queue was listening (another process, a restart, an overflowing
queue) are found by a catch-up scan at start. Nothing here runs on the download path.

The thread stays out of the requests' way: parsing is Python work that holds the GIL, and a thread that
holds it makes every request thread wait for it after each system call (a bulk upload of 2,000 entries
took four times as long with the parser running beside it). So the server parses in a child process
(:class:`~cache_server.parsing.worker.ParserProcess`, at a lower CPU priority; this thread only reads its
answers and records them), and the thread still waits until the process has served no request for
:data:`QUIET_SECONDS` (:class:`~cache_server.background.activity.Activity`; at most :data:`MAX_DELAY_SECONDS`
after the oldest entry waiting was stored), then parses what came, :data:`RECORD_BATCH` entries at a time
(their records in one transaction), going back to waiting as soon as a request comes in, unless what waits is
overdue. What waits is served a namespace at a time in turn (``_Backlog``), and the child answers a batch with
what it parsed in its slice (:data:`~cache_server.parsing.worker.SLICE_SECONDS`), so one namespace's backlog
delays another's new entry by about an entry or two, not by the whole backlog. A catch-up scan runs as
soon as it is asked for, also :data:`RECORD_BATCH` entries to a
transaction. Only without a child process (one configured as none) does the thread parse itself: a batch the
child cannot finish is parsed again an entry at a time in fresh children, and the entry that kills or stalls
one is recorded as unparseable; while no child can be started, nothing is parsed (a catch-up scan follows).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from cache_protocol.text import shown
from cache_server.background.activity import Activity
from cache_server.errors import CacheError
from cache_server.index.graph_records import GraphRecord, GraphRepository
from cache_server.parsing.hlo import NO_MODULE, GraphInfo
from cache_server.parsing.worker import (
    ENTRY_SECONDS,
    RETRY_SECONDS,
    ChildFailed,
    ChildNotStarted,
    ParseOutcome,
    ParserProcess,
    ParserResting,
    parse_blob,
)
from cache_server.storage.base import BlobStore

__all__ = ["ParsingService"]

log = logging.getLogger(__name__)
CATCH_UP_BATCH = 200
QUIET_SECONDS = 0.25  # parse once the process has served no request for this long ...
MAX_DELAY_SECONDS = 10.0  # ... or once the oldest entry waiting was stored this long ago
RECORD_BATCH = 50  # entries parsed between looks at the queue; their records written in one transaction


class ParsingService:
    """Keeps ``entry_graphs`` filled in for every stored entry: ``notify`` queues a new one, ``catch_up``
    parses every entry not parsed yet, ``wait_idle`` waits for what is queued."""

    def __init__(
        self,
        repository: GraphRepository,
        store: BlobStore,
        *,
        activity: Activity | None = None,
        queue_size: int = 10_000,
        parser: ParserProcess | None = None,
    ) -> None:
        self._repository = repository
        self._activity = activity or Activity()
        self._store = store
        self._parser = parser
        # (when stored, namespace, key); at most queue_size wait here or in _run, the rest overflow to a
        # catch-up scan
        self._queue: queue.Queue[tuple[float, str, str] | None] = queue.Queue(maxsize=queue_size)
        self._catch_up_due = False  # a catch-up scan is asked for (counted in _pending from that moment)
        self._pending = 0  # queued and not yet parsed, plus one for a catch-up scan asked for or running
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()  # a catch-up scan ends between entries once set
        self._retry_due = False  # entries were left unparsed as no child ran: a catch-up scan after a rest
        self._retry_at = 0.0

    def notify(self, namespace: str, key: str) -> None:
        """Queue a newly stored entry (called on the upload path: never blocks, never raises)."""
        with self._changed:
            try:
                self._queue.put_nowait((time.monotonic(), namespace, key))
                self._pending += 1
            except queue.Full:
                self._request_catch_up()  # the catch-up scan will find it

    def parse(self, namespace: str, key: str) -> GraphRecord:
        """Parse one stored entry and record the result (an unparseable entry is recorded as such)."""
        record = self._parsed(namespace, key)
        self._repository.record_graph(record)
        return record

    def _parsed(self, namespace: str, key: str) -> GraphRecord:
        """What parsing one stored entry finds (not recorded yet), parsed on this thread."""
        parsed = parse_blob(self._store, namespace, key)
        return _record(namespace, key, parsed.info, parsed.why)

    def _parse_batch(self, batch: list[tuple[str, str]]) -> tuple[list[GraphRecord], int]:
        """The records of a batch's first entries, and how many entries they are: from the child process
        when there is one (never parsed on this thread then; it may answer for only the first entries, see
        :data:`~cache_server.parsing.worker.SLICE_SECONDS`); an entry that could not be read now is logged
        and left out."""
        if self._parser is not None:
            outcomes = self._child_outcomes(batch)
            return _records(batch[: len(outcomes)], outcomes), len(outcomes)
        records: list[GraphRecord] = []
        for namespace, key in batch:
            if self._stopping.is_set():
                break
            try:
                records.append(self._parsed(namespace, key))
            except CacheError as exc:
                log.warning("graph parsing skipped: %s", exc.detail)
            except Exception:
                log.exception("graph parsing failed")
        return records, len(batch)

    def _child_outcomes(self, batch: list[tuple[str, str]]) -> list[ParseOutcome]:
        """The batch's outcomes from the child; when it cannot finish the batch, each entry's from a fresh
        child with :data:`~cache_server.parsing.worker.ENTRY_SECONDS` (the one that fails is unparseable).
        Entries not parsed (no child can be started, or a stop) are left for a catch-up scan."""
        assert self._parser is not None
        later = [ParseOutcome(error="not parsed: no parser process") for _ in batch]
        if self._stopping.is_set():
            return later
        try:
            return self._parser.parse(batch)
        except (ParserResting, ChildNotStarted) as exc:
            self._not_started(exc)
            return later
        except ChildFailed as exc:
            if self._stopping.is_set():  # stopping kills the child mid-batch: no failure
                return later
            log.warning("the graph parser process failed a batch (%s); parsing it an entry at a time", exc)
        outcomes: list[ParseOutcome] = []
        for item in batch:
            if self._stopping.is_set():
                break
            try:
                outcomes += self._parser.parse([item], seconds=ENTRY_SECONDS)
            except (ParserResting, ChildNotStarted) as exc:
                self._not_started(exc)
                break
            except ChildFailed as exc:
                if self._stopping.is_set():
                    break
                outcomes.append(ParseOutcome(unparseable=str(exc)))
        return outcomes + later[len(outcomes) :]

    def _not_started(self, exc: Exception) -> None:
        """No child runs: the entries wait for a catch-up scan, asked for once the parser may start again."""
        if not self._stopping.is_set():
            log.warning("graph parsing postponed: %s", exc)
            with self._changed:
                self._retry_due = True

    def parse_many(self, items: list[tuple[str, str]]) -> int:
        """Parse these entries and record the results, at most :data:`RECORD_BATCH` to a transaction; a
        failure to parse or record one entry is logged and does not stop the others. Returns how many were
        recorded."""
        done = 0
        while items and not self._stopping.is_set():
            handled, recorded = self._parse_slice(items[:RECORD_BATCH])
            done += recorded
            items = items[handled:]
        return done

    def _parse_slice(self, batch: list[tuple[str, str]]) -> tuple[int, int]:
        """Parse the batch's first entries (all, or what the child parsed in its slice) and record them in
        one transaction: how many were dealt with (at least one) and how many recorded."""
        records, handled = self._parse_batch(batch)
        if self._stopping.is_set():  # the database is closed next: record nothing more
            return len(batch), 0
        recorded = 0
        try:
            recorded = self._repository.record_graphs(records)
        except CacheError as exc:
            log.warning("graph records not written: %s", exc.detail)
        except Exception:
            log.exception("graph records not written")
        return max(handled, 1), recorded

    def catch_up(self) -> int:
        """Parse every entry that has no record yet, :data:`RECORD_BATCH` to a transaction; returns how
        many were recorded. Ends early on a stop, or when an entry could not be recorded (the next scan
        tries it again)."""
        done = 0
        while not self._stopping.is_set():
            batch = self._repository.unparsed_entries(CATCH_UP_BATCH)
            recorded = self.parse_many(list(batch))
            done += recorded
            if len(batch) < CATCH_UP_BATCH or recorded < len(batch):
                break
        return done

    def child_pid(self) -> int | None:
        """The process id of the parser's child while one runs (None without one: none started yet, or a
        service configured to parse on its own thread)."""
        return None if self._parser is None else self._parser.child_pid()

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
            with contextlib.suppress(queue.Full):  # a full queue: the thread sees _stopping within a second
                self._queue.put_nowait(None)
            self._thread.join(timeout=10)
            self._thread = None
        if self._parser is not None:
            self._parser.close()

    def _done(self, count: int) -> None:
        with self._changed:
            self._pending -= count
            self._changed.notify_all()

    def _run(self) -> None:
        waiting = _Backlog()
        while True:
            with self._changed:
                if self._retry_due:  # entries left unparsed: scan for them once the parser may start
                    self._retry_due, self._retry_at = False, time.monotonic() + RETRY_SECONDS
                if self._retry_at and time.monotonic() >= self._retry_at:
                    self._retry_at = 0.0
                    self._request_catch_up()
                due, self._catch_up_due = self._catch_up_due, False
            if due:
                self._guarded(self.catch_up)
                self._done(1)
            if self._gather(waiting):
                return
            while waiting and not self._stopping.is_set():
                overdue = time.monotonic() - waiting.oldest() >= MAX_DELAY_SECONDS
                if not overdue and not self._activity.quiet_for(QUIET_SECONDS):
                    break  # requests are being served: wait for a quiet moment
                batch = waiting.take(RECORD_BATCH)
                handled, _ = self._parse_slice([(ns, key) for _, ns, key in batch])  # logs what fails
                self._drain(waiting)  # entries stored meanwhile: their namespaces join the turns
                waiting.put_back(batch[:handled], batch[handled:])
                self._done(handled)

    def _drain(self, waiting: _Backlog) -> None:
        """Move what is queued now into ``waiting`` (up to the queue's size), without waiting."""
        while len(waiting) < self._queue.maxsize:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:  # (a stop: seen by the loop through _stopping)
                waiting.add(*item)

    def _gather(self, waiting: _Backlog) -> bool:
        """Move queued entries into ``waiting`` until, with something waiting, the process is quiet (no
        request for :data:`QUIET_SECONDS`) or the oldest entry is overdue; with nothing waiting, return after
        a second at most, for a catch-up scan asked for meanwhile. True on a stop. At most the queue's size
        wait in ``waiting``: beyond that entries stay queued, and a full queue asks for a catch-up scan."""
        while not self._stopping.is_set():
            if waiting:
                overdue_in = waiting.oldest() + MAX_DELAY_SECONDS - time.monotonic()
                if overdue_in <= 0 or self._activity.quiet_for(QUIET_SECONDS):
                    return False
                wait = min(QUIET_SECONDS / 5, overdue_in)
                if len(waiting) >= self._queue.maxsize:
                    if self._stopping.wait(wait):
                        return True
                    continue
            else:
                wait = 1.0
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                if not waiting:
                    return False
                continue
            if item is None:
                return True
            waiting.add(*item)
        return True

    @staticmethod
    def _guarded(work: Callable[[], object]) -> None:
        try:
            work()
        except CacheError as exc:
            log.warning("graph parsing skipped: %s", exc.detail)
        except Exception:
            log.exception("graph parsing failed")


class _Backlog:
    """The entries waiting to be parsed, a queue per namespace, served in turn: a batch takes one entry of
    each namespace waiting, then the next of each, and so on; what the child did not get to goes back to the
    front, and the namespaces it served go behind the others. So one namespace's backlog, however long or
    slow, delays another namespace's new entry by about one slice of the child's work (one entry, if each
    takes longer), not by the whole backlog."""

    def __init__(self) -> None:
        self._lanes: OrderedDict[str, deque[tuple[float, str]]] = OrderedDict()  # namespace -> (stored, key)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, stored: float, namespace: str, key: str) -> None:
        self._lanes.setdefault(namespace, deque()).append((stored, key))
        self._size += 1

    def oldest(self) -> float:
        """When the longest-waiting entry was stored (each namespace's first is its oldest)."""
        return min(lane[0][0] for lane in self._lanes.values())

    def take(self, count: int) -> list[tuple[float, str, str]]:
        """Up to ``count`` entries, ``(stored, namespace, key)``, one namespace after another."""
        taken: list[tuple[float, str, str]] = []
        while len(taken) < count and self._lanes:
            namespace, lane = next(iter(self._lanes.items()))
            stored, key = lane.popleft()
            taken.append((stored, namespace, key))
            if lane:
                self._lanes.move_to_end(namespace)
            else:
                del self._lanes[namespace]
        self._size -= len(taken)
        return taken

    def put_back(self, served: list[tuple[float, str, str]], left: list[tuple[float, str, str]]) -> None:
        """After a batch: the entries not parsed (``left``) back at the front, in the order they were taken,
        then the namespaces just ``served`` behind every other (those that joined meanwhile too)."""
        for stored, namespace, key in reversed(left):
            self._lanes.setdefault(namespace, deque()).appendleft((stored, key))
            self._lanes.move_to_end(namespace, last=False)
        self._size += len(left)
        for _, namespace, _ in served:
            if namespace in self._lanes:
                self._lanes.move_to_end(namespace)


def _reason(why: str | None) -> str:
    """Why an entry has no graph, as the index keeps it: printable (cache_protocol.text), cut to 256."""
    text = shown(why or NO_MODULE)
    return text if len(text) <= 256 else text[:255] + "…"


def _record(namespace: str, key: str, info: GraphInfo | None, why: str | None = None) -> GraphRecord:
    if info is None:
        return GraphRecord(namespace, key, module=None, unparseable=_reason(why))
    body = info.body
    if body is None:  # too large to walk: recorded as such ("" structure), not parsed again
        return GraphRecord(
            namespace, key, info.module, info.signature, info.shapes, info.source, structure=""
        )
    return GraphRecord(
        namespace,
        key,
        info.module,
        info.signature,
        info.shapes,
        info.source,
        structure=body.structure,
        program=body.program,
        whole=body.whole,
        ops=body.ops_text(),
    )


def _records(batch: list[tuple[str, str]], outcomes: list[ParseOutcome]) -> list[GraphRecord]:
    """The child's outcomes as records; an entry it could not read now is logged and left for a catch-up,
    one that broke a bound of the parser (or killed or stalled its child) is recorded as unparseable."""
    records: list[GraphRecord] = []
    for (namespace, key), outcome in zip(batch, outcomes, strict=True):
        if outcome.error is not None:
            log.warning("graph parsing of %s/%s skipped: %s", namespace, key, outcome.error)
        elif outcome.unparseable is not None:
            log.warning("graph of %s/%s recorded as unparseable: %s", namespace, key, outcome.unparseable)
            records.append(_record(namespace, key, None, outcome.unparseable))
        else:
            records.append(_record(namespace, key, outcome.info, outcome.why))
    return records
