"""Wall-clock helpers for tests whose traffic and checks must fall on one UTC day (the daily rollup)."""

from __future__ import annotations

import datetime as dt
import time

__all__ = ["ManualMonotonic", "ShiftedClock", "clear_of_utc_midnight"]


def clear_of_utc_midnight(seconds: float = 60.0) -> None:
    """Return at once, unless UTC midnight is less than ``seconds`` away: then wait until it has passed.

    A test that makes traffic and then checks today's row of the daily rollup fails if the day changes in
    between; calling this first makes the test deterministic at the cost of a rare wait.
    """
    now = dt.datetime.now(dt.timezone.utc)
    midnight = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), tzinfo=dt.timezone.utc)
    left = (midnight - now).total_seconds()
    if left < seconds:
        time.sleep(left + 0.5)


class ShiftedClock:
    """A clock for the server's services: the real UTC time plus an offset the test moves forward.

    Entries age by :meth:`advance` instead of by sleeping, and times still increase between calls, so the
    order of uploads and uses is the order they happened in.
    """

    def __init__(self) -> None:
        self.offset = dt.timedelta(0)

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.timezone.utc) + self.offset

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward."""
        self.offset += dt.timedelta(seconds=seconds)


class ManualMonotonic:
    """A monotonic clock that moves only when the test says (:meth:`advance`): for what the services time
    in seconds, such as how long a memory copy of an entry lasts (``build_services(monotonic=...)``)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
