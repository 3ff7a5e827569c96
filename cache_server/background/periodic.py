"""Work done every few seconds in a background thread (batched counters, budget eviction)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from cache_server.errors import CacheError

__all__ = ["Periodic"]

log = logging.getLogger(__name__)


class Periodic:
    """Calls ``work`` every ``interval`` seconds (the first time after ``first_delay``, by default the
    interval) in a daemon thread named ``name``, from :meth:`start` until :meth:`stop`. A failing call is
    logged as ``what`` failed (an outage as one line, anything else with its traceback) and the next one
    runs on time."""

    def __init__(
        self,
        name: str,
        what: str,
        interval: float,
        work: Callable[[], object],
        *,
        first_delay: float | None = None,
    ) -> None:
        self._name = name
        self._what = what
        self._interval = interval
        self._first_delay = interval if first_delay is None else first_delay
        self._work = work
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop calling; waits up to ``timeout`` seconds for a call in progress to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None

    def _run(self) -> None:
        delay = self._first_delay
        while not self._stop.wait(delay):
            delay = self._interval
            try:
                self._work()
            except CacheError as exc:
                log.warning("%s skipped: %s", self._what, exc.detail)
            except Exception:
                log.exception("%s failed", self._what)
