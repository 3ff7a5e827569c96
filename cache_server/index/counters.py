"""The counters (:data:`cache_server.domain.COUNTERS`): each namespace's totals in its row, and the daily
rollup (one row per namespace and UTC day), always moved together inside the caller's transaction.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from cache_server.domain import COUNTERS
from cache_server.index.database import Database
from cache_server.index.models import DailyStats, Namespace

__all__ = ["add_counts"]


def add_counts(
    db: Database,
    session: Session,
    namespace: str,
    day: dt.date,
    *,
    last_used: dt.datetime | None = None,
    **deltas: int,
) -> None:
    """Add ``deltas`` (counter name -> amount) to the namespace's counters and to its rollup row of ``day``.

    A namespace without a row (a miss on a name nobody registered) gets neither. ``last_used`` also moves
    the namespace's last use.
    """
    unknown = set(deltas) - set(COUNTERS)
    if unknown:
        raise ValueError(f"not counters: {sorted(unknown)}")
    changed = {name: amount for name, amount in deltas.items() if amount}
    values: dict[str, Any] = {name: getattr(Namespace, name) + amount for name, amount in changed.items()}
    if last_used is not None:
        values["last_used_at"] = last_used
    if not values:
        return
    counted = session.execute(
        update(Namespace).where(Namespace.name == namespace).values(**values).returning(Namespace.name)
    ).first()
    if counted is None or not changed:
        return
    row = {name: changed.get(name, 0) for name in COUNTERS}
    stmt = db.insert(DailyStats).values(day=day, namespace=namespace, **row)
    stmt = stmt.on_conflict_do_update(
        index_elements=["day", "namespace"],
        set_={name: getattr(DailyStats, name) + stmt.excluded[name] for name in changed},
    )
    session.execute(stmt)
