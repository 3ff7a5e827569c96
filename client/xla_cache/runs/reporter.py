"""The run reporter: one per process that warmed, it tells the server what the run found, compiled and paid.

:func:`xla_cache.warming.warm` makes one when it points the framework at its directory (unless
``XLA_CACHE_RUN_REPORTS=0``). The uploader's background thread calls :meth:`RunReporter.tick` on each of
its passes: the first tick after the warm sends a report, then one every ``XLA_CACHE_REPORT_INTERVAL``
seconds; the exit handler and :func:`xla_cache.stop` call :meth:`RunReporter.finish` for the last one (with
``ended_at``). So a job killed with SIGKILL leaves what its last periodic report said.

Each report (``POST /v1/runs``, :mod:`cache_protocol.runs`) carries the run's cumulative numbers and the
misses not yet reported, at most :data:`~cache_protocol.runs.MAX_MISSES_PER_REPORT`; the rest wait for the
next one. Each report also names the entries the job loaded since the last one (``hit_keys``, at most
:data:`~cache_protocol.runs.MAX_HITS_PER_REPORT`): the server prices each hit at the compile time recorded
with its entry. A hit is an entry file the warm left that was read after it: when the warm is done the
reporter sets each such file's access time just before its modification time (Linux's default
``relatime`` then records the next read), and a later access time means the framework loaded it. A file
system mounted ``noatime`` records none: its hits are counted, not named, and save nothing. A miss is an
entry file the job's compiles wrote: a key that was not in the directory after the
warm (or was, and was written again: it had failed to load), and that the follower did not place. Only the
process that writes the cache reports keys (JAX: process 0).

It fails open like the rest of the client: a server that is down, old (no ``/v1/runs``) or refuses costs
one log line, never an exception in the job, and at exit at most :data:`EXIT_SECONDS`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cache_protocol.runs import (
    HOST_MAX_LENGTH,
    MAX_HITS_PER_REPORT,
    MAX_MISSES_PER_REPORT,
    MAX_MISSES_PER_RUN,
    MODULE_MAX_LENGTH,
    SOURCE_MAX_LENGTH,
    report_numbers,
    seconds_clamped,
)
from xla_cache.errors import ServerError, ServerProblem, ServerUnavailable
from xla_cache.frameworks import Framework
from xla_cache.http.api import CacheApi
from xla_cache.http.deadline import Deadline
from xla_cache.localcache.cachedir import LocalFile, scan
from xla_cache.logs import logger
from xla_cache.runs.choice import collector_for
from xla_cache.runs.collectors import CompileCounts, RunCollector
from xla_cache.runs.ranks import process_index
from xla_cache.transfer.plan import WarmPlan

__all__ = [
    "EXIT_SECONDS",
    "REPORT_SECONDS",
    "Miss",
    "RunReporter",
    "Transfers",
    "WarmFacts",
    "reporter_for",
]


REPORT_SECONDS = 5.0  # the bound on one periodic report (it runs on the uploader's thread)
EXIT_SECONDS = 3.0  # the bound on the last reports, at exit


@dataclass(frozen=True)
class WarmFacts:
    """What the warm did: when it was called (unix seconds), how long it took, and the entries (and their
    bytes) it left in the directory from the server: downloaded or already there."""

    started_at: float
    seconds: float = 0.0
    bytes: int = 0
    entries: int = 0


@dataclass(frozen=True)
class Transfers:
    """The background's numbers: entries uploaded, entries the follower placed (and their keys)."""

    uploaded: int = 0
    live: int = 0
    live_keys: frozenset[str] = frozenset()
    unverified: int = 0  # entries the warm and the follower skipped: signed by no trusted key


@dataclass(frozen=True)
class Miss:
    """One compile of the run, as reported (``new_misses`` items)."""

    key: str
    module: str | None = None
    components: dict[str, str] | None = None
    compile_seconds: float | None = None
    load_failed: bool = False
    source: str | None = None

    def as_dict(self, *, source: bool = True) -> dict[str, Any]:
        """The ``new_misses`` item: the fields by name (``source`` only where known and asked for: a
        server older than the field refuses it)."""
        item = asdict(self)
        if item["source"] is None or not source:
            del item["source"]
        return item


@dataclass
class _State:
    """What the reporter found and sent so far (guarded by the reporter's lock)."""

    misses: list[Miss] = field(default_factory=list)  # every miss found, at most MAX_MISSES_PER_RUN
    sent: int = 0  # misses[:sent] reached the server
    seen: set[str] = field(default_factory=set)  # keys already taken for misses
    overflow: int = 0  # misses found past MAX_MISSES_PER_RUN (counted, not kept)
    reports: int = 0  # reports the server took
    ended_at: float | None = None
    disabled: str | None = None  # why no more reports are sent
    hits: list[str] = field(default_factory=list)  # keys of warmed entries the job read, in order found
    hits_sent: int = 0  # hits[:hits_sent] reached the server
    failing: bool = False  # the last report failed (warned once)
    runtime_sent: bool = False  # the runtime's key components reached the server (sent until they do)
    unanswered: bool = False  # ... because the server did not answer it (not a refusal)


def _refused(problem: ServerProblem) -> bool:
    """The server refused the report itself (4xx other than a timeout or a rate limit): sending it again
    would not help."""
    return (
        isinstance(problem, ServerError) and 400 <= problem.status < 500 and problem.status not in (408, 429)
    )


class RunReporter:
    """Reports one run of one process to the server (``api``; None: it only keeps the numbers).

    ``timeout`` bounds each report (the warm's timeout); ``unanswered``: the warm's conversation ended with
    the server not answering, so the exit sends nothing until a periodic report got through; ``warned``: the
    warm already warned of trouble with the server, so reports that fail for it say so at info level only
    (a job whose server is down gets one warning, not one per part of the client).
    """

    def __init__(
        self,
        *,
        api: CacheApi | None,
        namespace: str,
        directory: Path,
        adapter: Framework,
        collector: RunCollector,
        transfers: Callable[[], Transfers],
        baseline: Mapping[str, LocalFile],
        unloadable: Iterable[str] = (),
        interval: float,
        timeout: float = REPORT_SECONDS,
        unanswered: bool = False,
        warned: bool = False,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.run_id = uuid.uuid4().hex
        self.api = api
        self.namespace = namespace
        self.directory = directory
        self.interval = interval
        self._adapter = adapter
        self._collector = collector
        self._transfers = transfers
        self._baseline = {key: (item.size, item.mtime_ns) for key, item in baseline.items()}
        self._paths = {key: item.path for key, item in baseline.items()}
        self._unread: dict[str, int] = {}  # warmed entries not read yet: key -> the access time set at begin
        self._unloadable = set(unloadable)
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._state = _State(unanswered=unanswered)
        self._warned = warned
        self._timeout = timeout
        self._warm: WarmFacts | None = None
        self._next_due = 0.0
        self._host = socket.gethostname()[:HOST_MAX_LENGTH] or "unknown"
        self._process_index = 0
        self._framework = collector.framework()
        self._runtime: dict[str, Any] | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------

    def begin(self, warm: WarmFacts) -> None:
        """The warm is done: from now on, ticks send reports (the first at once)."""
        try:
            framework_index = self._collector.process_index()
        except Exception:  # a runtime that cannot say: the launcher's rank, if any
            framework_index = None
        self._process_index = process_index(framework_index)
        # Fixed for the run: the server refuses (409) a run whose framework changes between reports.
        self._framework = self._collector.framework()
        try:  # read now: the runtime is started, and the job's settings are made
            self._runtime = self._collector.runtime()
        except Exception:  # a report only explains: one without them is still one
            logger.debug("xla-cache: could not read the runtime's key components", exc_info=True)
            self._runtime = None
        self._next_due = self._clock()
        self._unread = _mark_unread(self._paths, self._baseline)
        self._warm = warm

    def tick(self) -> None:
        """Send a report if one is due (called on the uploader's thread; never raises)."""
        try:
            if self._warm is None or self.api is None or self._clock() < self._next_due:
                return
            if not self._lock.acquire(blocking=False):
                return  # the exit's report is on its way
            try:
                self._next_due = self._clock() + self.interval
                self._send(final=False, deadline=Deadline(min(REPORT_SECONDS, self._timeout)))
            finally:
                self._lock.release()
        except Exception:
            logger.debug("xla-cache: a run report failed", exc_info=True)

    def finish(self, bound: float = EXIT_SECONDS) -> None:
        """The last report(s) of the run, with ``ended_at``, within ``bound`` seconds (at most the warm's
        timeout; never raises). Skipped while the server does not answer: the warm's conversation or the
        last report timed out or could not connect."""
        try:
            if self._warm is None:
                return
            bound = min(bound, self._timeout)
            deadline = Deadline(bound)
            if not self._lock.acquire(timeout=bound):
                return
            try:
                if self._state.ended_at is not None:
                    return  # finished already (stop, then exit)
                self._state.ended_at = self._wall()
                if self.api is None:
                    return
                if self._state.unanswered:
                    # A server that did not answer the last report must not cost the job's exit a wait.
                    logger.info("xla-cache: not sending the last run report: the server did not answer")
                    return
                # The misses not yet reported go in as many reports as they need, while time is left.
                while self._send(final=True, deadline=deadline) and self._unsent() and not deadline.expired():
                    pass
            finally:
                self._lock.release()
        except Exception:
            logger.debug("xla-cache: the last run report failed", exc_info=True)

    def current(self) -> dict[str, Any]:
        """The run as reported so far and as it stands now: the numbers, every compile's key found
        (``missed_keys``: key, module, components, seconds, load_failed), and how many of those no report
        carried yet (``unreported_misses``)."""
        with self._lock:
            self._find_misses()
            body = self._numbers()
            self._find_hits()
            body["missed_keys"] = [miss.as_dict() for miss in self._state.misses]
            body["hit_keys"] = list(self._state.hits)
            body["unreported_misses"] = len(self._state.misses) - self._state.sent
            body["misses_not_kept"] = self._state.overflow
            body["reports_sent"] = self._state.reports
            body["reporting"] = self.api is not None and self._state.disabled is None
            return body

    # -- internals (under the lock) -----------------------------------------------------------------------

    def _unsent(self) -> int:
        return len(self._state.misses) - self._state.sent + len(self._state.hits) - self._state.hits_sent

    def _find_misses(self) -> None:
        """Add the entry files the job's compiles wrote since the last look."""
        state = self._state
        if not self._adapter.uploads_here():
            return  # another process writes this directory: its files are not this one's compiles
        live = self._transfers().live_keys
        fresh: list[LocalFile] = []
        for key, item in scan(self.directory, self._adapter.is_entry, skip=state.seen).items():
            before = self._baseline.get(key)
            if before == (item.size, item.mtime_ns) or key in live or item.size == 0:
                continue  # warmed (or placed by the follower), or still being created
            fresh.append(item)
        if not fresh:
            return
        try:
            facts = self._collector.facts(fresh)
        except Exception:
            logger.debug("xla-cache: could not read what the framework knows of new entries", exc_info=True)
            facts = {}
        for item in sorted(fresh, key=lambda f: f.mtime_ns):
            state.seen.add(item.key)
            if len(state.misses) >= MAX_MISSES_PER_RUN:
                state.overflow += 1
                continue
            known = facts.get(item.key)
            module = known.module[:MODULE_MAX_LENGTH] if known and known.module else None
            spent = known.compile_seconds if known else None
            state.misses.append(
                Miss(
                    key=item.key,
                    module=module,
                    components=known.components if known else None,
                    compile_seconds=seconds_clamped(spent) if spent is not None else None,
                    load_failed=item.key in self._unloadable or item.key in self._baseline,
                    source=known.source[-SOURCE_MAX_LENGTH:] if known and known.source else None,
                )
            )

    def _find_hits(self) -> None:
        """Add the warmed entries read since :meth:`begin` (a later access time than the one set then)."""
        if not self._unread or not self._adapter.uploads_here():
            return
        for key, marked in list(self._unread.items()):
            try:
                info = self._paths[key].stat()
            except OSError:  # removed (evicted by the framework, or failed to load and rewritten)
                del self._unread[key]
                continue
            if info.st_atime_ns > marked and (info.st_size, info.st_mtime_ns) == self._baseline[key]:
                del self._unread[key]
                self._state.hits.append(key)

    def _numbers(self) -> dict[str, Any]:
        warm = self._warm or WarmFacts(started_at=self._wall())
        try:
            counts = self._collector.counts()
        except Exception:
            logger.debug("xla-cache: could not read the framework's counters", exc_info=True)
            counts = CompileCounts()
        transfers = self._transfers()
        measured = {
            "warm_seconds": warm.seconds,
            "warm_bytes": warm.bytes,
            "warm_entries": warm.entries,
            "uploaded_entries": transfers.uploaded,
            "live_entries": transfers.live,
            "unverified_entries": transfers.unverified,
            **counts.numbers(),  # the framework's: hits, misses, compile_seconds, load_failures...
        }
        measured["load_failures"] = measured.get("load_failures", 0) + len(self._unloadable)
        return {
            "run_id": self.run_id,
            "namespace": self.namespace,
            "framework": self._framework,
            "host": self._host,
            "process_index": self._process_index,
            "started_at": round(warm.started_at, 3),
            "ended_at": round(self._state.ended_at, 3) if self._state.ended_at is not None else None,
            **report_numbers(measured),  # each within its bounds; one not measured is 0
        }

    def _send(self, *, final: bool, deadline: Deadline) -> bool:
        """One report; whether the server took it."""
        state = self._state
        if self.api is None or state.disabled is not None:
            return False
        self._find_misses()
        self._find_hits()
        batch = state.misses[state.sent : state.sent + MAX_MISSES_PER_REPORT]
        hits = state.hits[state.hits_sent : state.hits_sent + MAX_HITS_PER_REPORT]
        body = self._numbers()
        body["new_misses"] = [miss.as_dict() for miss in batch]
        body["hit_keys"] = hits
        if self._runtime is not None and not state.runtime_sent:
            body["runtime"] = self._runtime
        problem = self._post(body, deadline)
        refused = problem is not None and _refused(problem) and not _not_taken(problem)
        if refused and ("runtime" in body or any(miss.source for miss in batch)):
            # A server from before runtimes or the misses' source field (an unknown field is refused): the
            # report goes without them, the compiles with it.
            self._runtime = None
            body.pop("runtime", None)
            body["new_misses"] = [miss.as_dict(source=False) for miss in batch]
            problem = self._post(body, deadline)
        if problem is not None and batch and _refused(problem) and not _not_taken(problem):
            # Something in these compiles is out of the server's bounds: they are dropped, not the run.
            logger.warning(
                "xla-cache: the server refused %d compiles of run %s (%s); reporting without them",
                len(batch),
                self.run_id,
                problem.reason,
            )
            state.sent += len(batch)
            batch, body["new_misses"] = [], []
            problem = self._post(body, deadline)
        if problem is None:
            state.sent += len(batch)
            state.hits_sent += len(hits)
            state.runtime_sent = state.runtime_sent or "runtime" in body
            state.reports += 1
            state.unanswered = False
            if state.failing:
                logger.info("xla-cache: run reports reach the server again")
                state.failing = False
            return True
        if _refused(problem):
            state.disabled = problem.reason
            # A token the warm's own requests were refused with was warned of then: one warning per cause.
            unauthorized = isinstance(problem, ServerError) and problem.status == 401
            quiet = _not_taken(problem) and (self._warned or not unauthorized)
            level = logging.INFO if quiet else logging.WARNING
            logger.log(level, "xla-cache: not sending run reports (%s)", problem.reason)
        else:
            self._failed(problem, final=final)
        return False

    def _post(self, body: dict[str, Any], deadline: Deadline) -> ServerProblem | None:
        assert self.api is not None
        try:
            self.api.post_run(body, deadline)
        except ServerProblem as exc:
            return exc
        return None

    def _failed(self, problem: ServerProblem, *, final: bool) -> None:
        self._state.unanswered = isinstance(problem, ServerUnavailable)
        if not self._state.failing or final:
            logger.log(
                logging.INFO if self._warned else logging.WARNING,
                "xla-cache: could not send %s run report of %s: %s%s",
                "the last" if final else "a",
                self.namespace,
                problem.reason,
                "" if final else "; trying again later",
            )
        self._state.failing = True


def _mark_unread(paths: Mapping[str, Path], baseline: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    """Set each warmed entry's access time a second before its modification time, so that the next read
    of it moves the access time (``relatime`` moves it when it is not after the modification time); the
    time set, by key. A file that changed since the warm, or cannot be touched, is left out."""
    marked: dict[str, int] = {}
    for key, path in paths.items():
        size, mtime_ns = baseline[key]
        atime_ns = max(0, mtime_ns - 1_000_000_000)
        try:
            os.utime(path, ns=(atime_ns, mtime_ns))
            info = path.stat()
        except OSError:
            continue
        if (info.st_size, info.st_mtime_ns) == (size, mtime_ns):
            marked[key] = info.st_atime_ns
    return marked


def _not_taken(problem: ServerProblem) -> bool:
    """A server without run reports (404, 405: an older one), a token it does not take (401) or one that
    may not send them (403): no report is taken, whatever it holds."""
    return isinstance(problem, ServerError) and problem.status in (401, 403, 404, 405)


def reporter_for(
    plan: WarmPlan,
    api: CacheApi | None,
    *,
    baseline: Mapping[str, LocalFile],
    unloadable: Iterable[str],
    transfers: Callable[[], Transfers],
    unanswered: bool,
    warned: bool = False,
) -> RunReporter | None:
    """The reporter of a warm that points the framework at ``plan``'s directory (None with
    ``XLA_CACHE_RUN_REPORTS=0``): ``baseline`` is the directory's entries after the warm, ``unloadable``
    the keys the warm removed because the framework could not load them, ``unanswered`` whether the warm's
    conversation ended with the server not answering."""
    settings = plan.options.config.run_reports
    if not settings.enabled:
        return None
    return RunReporter(
        api=api,
        namespace=plan.namespace,
        directory=plan.directory,
        adapter=plan.options.framework,
        collector=collector_for(plan.options.framework),
        transfers=transfers,
        baseline=baseline,
        unloadable=unloadable,
        interval=settings.interval,
        timeout=plan.options.timeout,
        unanswered=unanswered,
        warned=warned,
    )
