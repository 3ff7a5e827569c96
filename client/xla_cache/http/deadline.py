"""A point in time after which the client stops waiting for the server."""

from __future__ import annotations

import time

__all__ = ["Deadline"]


class Deadline:
    """``seconds`` from now; every network wait is cut to what remains."""

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self._end = time.monotonic() + self.seconds

    def remaining(self) -> float:
        """Seconds left (never negative)."""
        return max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        """Whether no time is left."""
        return time.monotonic() >= self._end

    def wait_limit(self, cap: float | None = None) -> float:
        """What one network wait may take: the time left (at least 1 ms), at most ``cap``."""
        left = max(0.001, self.remaining())
        return left if cap is None else min(left, cap)
