"""This process's warm and what it left running: the framework's persistent cache is one per process, so
one directory, the report of the warm that pointed the framework at it, and the uploader, follower and run
reporter working for it until :func:`stop` or the process's exit (:class:`_Process`, one instance).
:func:`flush`, :func:`run_report` and :func:`stop` are the job's handles on it.
"""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xla_cache.http.api import CacheApi
from xla_cache.logs import logger
from xla_cache.runs import RunReporter
from xla_cache.transfer.follower import Follower
from xla_cache.transfer.uploader import Uploader, UploadReport
from xla_cache.warm_report import WarmReport

__all__ = ["PROCESS", "Background", "flush", "run_report", "stop"]


@dataclass(frozen=True)
class Background:
    """What a warm that pointed the framework at its directory leaves running."""

    uploader: Uploader
    follower: Follower | None
    api: CacheApi | None  # theirs to use, closed with them
    reporter: RunReporter | None = None

    @property
    def uploading(self) -> bool:
        return self.uploader.api is not None  # else it only watches the framework's load failures

    def stop(self, *, flush: bool) -> UploadReport:
        """Stop following and uploading (uploading what is complete first if ``flush``); the totals."""
        if self.follower is not None:
            self.follower.stop()
        self.uploader.stop()
        report = self.uploader.flush() if flush else self.uploader.report()
        if self.reporter is not None:
            self.reporter.finish()
        if self.api is not None:
            self.api.close()
        return report


class _Process:
    """This process's warm: the framework's persistent cache is one per process, so one directory, the
    report of the warm that pointed the framework at it, and the uploader and follower running for it.

    Its one instance is :data:`PROCESS`: :func:`~xla_cache.warming.warm` takes its turn with it and hands
    it what an initializing warm started; :func:`flush` and :func:`stop` act through it; at exit it
    uploads what is complete. Nothing else changes it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the two fields below
        self._report: WarmReport | None = None
        self._background: Background | None = None
        self._exit_handler = False
        # Warms that initialize the cache take turns; a warm of the directory already in use (another rank
        # thread of this process) returns that warm's report.
        self.turn = threading.Lock()

    @property
    def uploader(self) -> Uploader | None:
        background = self._background
        return background.uploader if background is not None else None

    @property
    def follower(self) -> Follower | None:
        background = self._background
        return background.follower if background is not None else None

    def warmed(self, directory: Path) -> WarmReport | None:
        """The report of the warm that pointed the framework at ``directory``, if it is the one in use."""
        report = self._report
        return report if report is not None and report.cache_dir == str(directory) else None

    def run(self, background: Background) -> None:
        """Keep ``background`` running for this process; what an earlier warm started stops (its complete
        entries uploaded first)."""
        with self._lock:
            old, self._background = self._background, background
            if not self._exit_handler:
                atexit.register(self._at_exit)
                self._exit_handler = True
        if old is not None:
            old.stop(flush=True)

    def record(self, report: WarmReport) -> None:
        """``report`` is the warm whose directory is in use now."""
        with self._lock:
            self._report = report

    def flush(self, timeout: float | None) -> UploadReport:
        uploader = self.uploader
        return uploader.flush(timeout) if uploader is not None else UploadReport()

    def stop(self, *, flush: bool) -> UploadReport:
        """Stop the background (uploading what is complete first if ``flush``); forget this process's warm."""
        with self._lock:
            background, self._background, self._report = self._background, None, None
        return background.stop(flush=flush) if background is not None else UploadReport()

    def _at_exit(self) -> None:
        background = self._background
        if background is None:
            return
        if background.follower is not None:
            background.follower.stop(timeout=1.0)  # a daemon thread: what it has not finished, it leaves
        uploader = background.uploader
        uploader.stop()
        report = uploader.flush(at_exit=True)
        if report.uploaded:
            logger.info(
                "xla-cache: uploaded %d new entries (%d bytes) to namespace %s",
                report.uploaded,
                report.bytes,
                uploader.namespace,
            )
        if background.reporter is not None:
            background.reporter.finish()

    def run_report(self) -> dict[str, Any] | None:
        background = self._background
        reporter = background.reporter if background is not None else None
        return reporter.current() if reporter is not None else None


PROCESS = _Process()


def flush(timeout: float | None = None) -> UploadReport:
    """Upload every complete new entry now (at most ``timeout`` seconds; default: warm's timeout).

    Returns the uploader's running totals; an empty report when :func:`warm` started no uploader.
    """
    return PROCESS.flush(timeout)


def run_report() -> dict[str, Any] | None:
    """This process's run as its reports tell it (:mod:`xla_cache.runs`): the run id, the cumulative numbers
    (hits, misses, compile seconds, uploads, ...), every compile's key found so far (``missed_keys``: key,
    module, JAX's key components, seconds) and how many of those no report carried yet. None when no warm
    pointed the framework at its cache in this process, or with ``XLA_CACHE_RUN_REPORTS=0``."""
    return PROCESS.run_report()


def stop(*, flush: bool = True) -> UploadReport:
    """Stop uploading (after uploading what is complete, unless ``flush`` is False); returns the totals.

    A later :func:`warm` in this process starts afresh.
    """
    return PROCESS.stop(flush=flush)
