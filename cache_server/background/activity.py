"""How busy this process is serving requests, for background work that should wait for a quiet moment.

Background work in a server process (parsing stored entries) is Python that holds the GIL; while it runs,
every request thread waits for the GIL again after each system call, and a bulk upload or a bundle slows
several times over. :class:`Activity` counts the requests in flight (the HTTP middleware tells it) so that
such work can run between requests instead of beside them.
"""

from __future__ import annotations

import threading
import time

__all__ = ["Activity"]


class Activity:
    """Requests in flight in this process, and when the last one began or ended. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._changed = time.monotonic()

    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._changed = time.monotonic()

    def end(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._changed = time.monotonic()

    def quiet_for(self, seconds: float) -> bool:
        """True when no request is in flight and none has begun or ended for ``seconds``."""
        with self._lock:
            return self._in_flight == 0 and time.monotonic() - self._changed >= seconds
