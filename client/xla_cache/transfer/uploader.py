"""The background uploader: sends each new, complete entry the framework writes into the cache directory.

torch_xla and JAX write an entry in place (no temporary name), so a file is sent only once it is complete:
this process no longer has it open for writing (``/proc/self/fd``), its size and modification time did not
change between two scans at least ``settle`` seconds apart, and the framework's adapter can load it. Only
entries are sent (never JAX's ``-atime`` or lock files). Each pass asks the server which of the ready files
it lacks and uploads those with their SHA-256 and, when the framework tells it, the compile time.

A background pass that finds nothing new costs a look at every file of a directory a warm filled with
thousands, beside the job's loop, every 2 s (0.25 s while following). So after a scan that left nothing
waiting (every file sent, refused, or known), the next passes skip the scan while the directory's list
cannot have changed (:class:`~xla_cache.localcache.cachedir.ListingWatch`: its time stamps, a full scan
at least every minute) and the framework reported no new load failure (an entry it failed to load is
written again in place, which leaves the directory's times alone). A file still being written, or not
yet settled, keeps each pass scanning until it is sent.

The uploader never raises into the job and warns at most once per outage. At interpreter exit it makes one
last pass within a bound; it skips that pass when the server did not answer its last call (a server that is
down or hangs must not cost the job a second timeout; so does an explicit flush) and says how to push the
entries later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xla_cache.errors import ServerProblem, ServerUnavailable
from xla_cache.frameworks import Framework
from xla_cache.http.api import CacheApi
from xla_cache.http.deadline import Deadline
from xla_cache.localcache.cachedir import (
    UPLOAD_LOCK_NAME,
    ListingWatch,
    LocalFile,
    files_open_for_writing,
    scan,
)
from xla_cache.localcache.dirlock import DirLock
from xla_cache.logs import logger
from xla_cache.transfer.upload import upload_entries

__all__ = ["UploadReport", "Uploader"]


@dataclass
class UploadReport:
    """What the uploader sent so far, and what it could not."""

    uploaded: int = 0
    bytes: int = 0
    already_present: int = 0
    conflicts: int = 0
    pending: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Uploader:
    """Watches one cache directory and uploads its complete new entries to one namespace.

    ``framework`` says which files are entries, what they took to compile and whether uploading must stop
    (torch_xla: SPMD switched after the warm changes the namespace); ``fingerprint`` is the namespace's.
    With ``api=None`` it only watches the framework's load failures (``upload=False``). ``on_tick`` is
    called after each background pass (the run reporter sends its periodic reports from there).
    """

    def __init__(
        self,
        api: CacheApi | None,
        namespace: str,
        directory: Path,
        *,
        framework: Framework,
        fingerprint: Mapping[str, Any] | None = None,
        known: Mapping[str, LocalFile] | None = None,
        interval: float = 2.0,
        settle: float = 1.0,
        timeout: float = 30.0,
        server_failed: bool = False,
        last_failure_unavailable: bool = False,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        self.api = api
        self._on_tick = on_tick
        self.namespace = namespace
        self.directory = directory
        self.interval = interval
        self.settle = settle
        self.timeout = timeout
        self.framework = framework
        self._fingerprint = dict(fingerprint or {})
        self._done: dict[str, tuple[int, int]] = {
            key: (item.size, item.mtime_ns) for key, item in (known or {}).items()
        }
        self._seen: dict[str, tuple[int, int, float]] = {}
        # files the framework could not load, or the server refuses for good (403), as seen
        self._refused: dict[str, tuple[int, int]] = {}
        self._totals = UploadReport()
        self._pass_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # True while the server's last answer was a failure; a warning was already given for it.
        self._failing = server_failed
        self._last_failure_unavailable = server_failed and last_failure_unavailable
        self._next_try = 0.0
        self._backoff = interval
        self._disabled_reason: str | None = None
        self._load_failures_baseline = framework.load_failures()
        self._load_failures_warned = False
        self._listing = ListingWatch(directory)
        self._failures_at_scan = -1  # the framework's load failures when the last scan began

    # -- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background thread (a daemon: it never keeps the interpreter alive)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="xla-cache-uploader", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the background thread without a last pass."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check_load_failures()
                if time.monotonic() >= self._next_try:
                    self._pass(final=False, deadline=Deadline(self.timeout), wait=False)
            except Exception:  # never let the thread die silently, never disturb the job
                logger.debug("xla-cache uploader pass failed", exc_info=True)
            if self._on_tick is not None:
                try:
                    self._on_tick()
                except Exception:
                    logger.debug("xla-cache uploader tick hook failed", exc_info=True)

    # -- public -------------------------------------------------------------------------------------------

    def flush(self, timeout: float | None = None, *, at_exit: bool = False) -> UploadReport:
        """Upload every complete entry now, within ``timeout`` seconds; returns the running totals.

        While the server does not answer (its last call was refused or timed out), this returns at once
        instead of waiting on it again: the background thread keeps retrying off the job's path, and a
        job never pays more than one timeout for an unresponsive server.
        """
        started = time.monotonic()
        bound = self.timeout if timeout is None else timeout
        self.check_load_failures()
        if self.api is None:
            return self._snapshot(started)
        if self._failing and self._last_failure_unavailable:
            pending = self._pending_count()
            if pending:
                logger.info(
                    "xla-cache: not uploading %d new entries %s: the server did not answer its last call; "
                    "upload them later with `xla-cache push --cache-dir %s --namespace %s`",
                    pending,
                    "at exit" if at_exit else "now",
                    self.directory.parent,
                    self.namespace,
                )
            self._totals.pending = pending
            return self._snapshot(started)
        self._pass(final=True, deadline=Deadline(bound), wait=True)
        return self._snapshot(started)

    def report(self) -> UploadReport:
        """The running totals (without a pass)."""
        return self._snapshot(time.monotonic())

    def check_load_failures(self) -> None:
        """Warn once if the framework failed to load cache entries since the warm."""
        if self._load_failures_warned:
            return
        failures = self.framework.load_failures() - self._load_failures_baseline
        if failures > 0:
            self._load_failures_warned = True
            logger.warning(
                "xla-cache: %s failed to load %d entries of the persistent cache in %s %s",
                self.framework.name,
                failures,
                self.directory,
                self.framework.load_failure_cause(),
            )

    # -- internals ----------------------------------------------------------------------------------------

    def _snapshot(self, started: float) -> UploadReport:
        totals = self._totals
        return UploadReport(
            uploaded=totals.uploaded,
            bytes=totals.bytes,
            already_present=totals.already_present,
            conflicts=totals.conflicts,
            pending=totals.pending,
            errors=list(totals.errors[-20:]),
            seconds=round(time.monotonic() - started, 3),
        )

    def _pending_count(self) -> int:
        return sum(
            1
            for key, item in scan(self.directory, self.framework.is_entry).items()
            if self._done.get(key) != (item.size, item.mtime_ns)
        )

    def _ready(self, final: bool) -> tuple[list[LocalFile], int]:
        """Entry files that are complete and not yet on the server, and how many entries are not on it yet
        (ready or not), from one look at the directory: a warmed job's holds thousands, and the background
        pass looks every few seconds beside the job's loop."""
        look = self._listing.begin()
        self._failures_at_scan = self.framework.load_failures()
        now = time.time()
        writing = files_open_for_writing(self.directory)
        ready: list[LocalFile] = []
        pending = 0
        waiting = 0  # pending and to be looked at again: being written, not settled, ready to send
        for key, item in scan(self.directory, self.framework.is_entry).items():
            state = (item.size, item.mtime_ns)
            if self._done.get(key) == state:
                continue
            pending += 1
            if self._refused.get(key) == state:
                continue
            waiting += 1
            if item.size == 0 or (writing is not None and key in writing):
                continue
            previous = self._seen.get(key)
            self._seen[key] = (item.size, item.mtime_ns, now)
            settled = now - item.mtime_ns / 1e9 >= self.settle
            unchanged = previous is not None and previous[:2] == state
            # A final pass (flush, exit) trusts a closed file: torch_xla wrote it from this process.
            if (final and writing is not None) or (settled and unchanged):
                problem = self.framework.entry_problem(item.path)
                if problem is None:
                    ready.append(item)
                else:
                    self._refused[key] = state  # not checked again, nor warned about, until it changes
                    waiting -= 1
                    logger.warning("xla-cache: not uploading %s: %s", item.path, problem)
        if waiting:
            self._listing.forget()
        else:
            self._listing.settled(look)
        return ready, pending

    def _nothing_new(self) -> bool:
        """Whether a background pass can skip its scan: the last one left nothing waiting, the directory's
        list has not changed since, and the framework failed to load no entry since (it writes those again
        in place)."""
        return self._listing.unchanged() and self.framework.load_failures() == self._failures_at_scan

    def _blocked(self) -> bool:
        if self._disabled_reason is not None:
            return True
        reason = self.framework.upload_blocked(self._fingerprint) if self._fingerprint else None
        if reason is not None:
            self._disabled_reason = reason
            logger.warning("xla-cache: %s; not uploading new entries to namespace %s", reason, self.namespace)
            return True
        return False

    def _pass(self, *, final: bool, deadline: Deadline, wait: bool) -> None:
        if not self._pass_lock.acquire(timeout=deadline.remaining() if wait else 0):
            return
        try:
            if self.api is None or self._blocked():
                return
            if not final and self._nothing_new():
                return  # the totals' pending count stands
            ready, pending = self._ready(final)
            if not ready:
                self._totals.pending = pending
                return
            times = self.framework.compile_times(ready)
            try:
                with DirLock(self.directory, UPLOAD_LOCK_NAME) as lock:
                    if not lock.acquire(deadline.remaining()):
                        return  # another process of this host is uploading: the next pass asks again
                    # One at a time: the job's own threads matter more, and at exit no pool may start.
                    result = upload_entries(self.api, self.namespace, ready, deadline, compile_times=times)
            except ServerProblem as exc:
                self._failed(exc)
                return
            states = {item.key: (item.size, item.mtime_ns) for item in ready}
            for key in result.done:
                self._done[key] = states[key]
            for key in result.refused:  # not sent again until the file changes
                self._refused[key] = states[key]
            totals = self._totals
            totals.uploaded += result.stored
            totals.bytes += result.bytes
            totals.already_present += result.already_present
            totals.conflicts += result.conflicts
            totals.errors.extend(result.errors)
            if result.problem is not None:
                self._failed(result.problem)
            else:
                self._succeeded()
            self._totals.pending = self._pending_count()
        finally:
            self._pass_lock.release()

    def _failed(self, problem: ServerProblem) -> None:
        self._last_failure_unavailable = isinstance(problem, ServerUnavailable)
        self._next_try = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, 60.0)
        if not self._failing:
            self._failing = True
            logger.warning(
                "xla-cache: cannot upload new entries to namespace %s: %s; training continues, retrying in "
                "the background",
                self.namespace,
                problem.reason,
            )

    def _succeeded(self) -> None:
        self._failing = False
        self._last_failure_unavailable = False
        self._backoff = self.interval
        self._next_try = 0.0
