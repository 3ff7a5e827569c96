"""The daily rollup: counters of one namespace for one UTC day, added to inside other writes' transactions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from cache_server.index.models import DailyStats, utcnow

__all__ = ["DAILY_COUNTERS", "bump_daily", "today"]

DAILY_COUNTERS = (
    "hits",
    "misses",
    "uploads",
    "evictions",
    "bytes_served",
    "bytes_uploaded",
    "compile_ms_saved",
)


def today() -> dt.date:
    """The current UTC day: the key of the rollup."""
    return utcnow().date()


def bump_daily(
    session: Session, insert: Callable[..., Any], namespace: str, day: dt.date, **deltas: int
) -> None:
    """Add ``deltas`` (counter name -> amount) to the namespace's row of ``day``, creating it if needed.

    ``insert`` is the dialect's insert (SQLite or PostgreSQL), which both know ``ON CONFLICT``; the caller's
    transaction holds the write, so the rollup moves together with the counters it mirrors.
    """
    unknown = set(deltas) - set(DAILY_COUNTERS)
    if unknown:
        raise ValueError(f"not daily counters: {sorted(unknown)}")
    changed = {name: amount for name, amount in deltas.items() if amount}
    if not changed:
        return
    row = {name: changed.get(name, 0) for name in DAILY_COUNTERS}
    stmt = insert(DailyStats).values(day=day, namespace=namespace, **row)
    stmt = stmt.on_conflict_do_update(
        index_elements=["day", "namespace"],
        set_={name: getattr(DailyStats, name) + stmt.excluded[name] for name in changed},
    )
    session.execute(stmt)
