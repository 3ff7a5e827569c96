"""Wall-clock helpers for tests whose traffic and checks must fall on one UTC day (the daily rollup)."""

from __future__ import annotations

import datetime as dt
import time

__all__ = ["clear_of_utc_midnight"]


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
