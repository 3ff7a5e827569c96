"""Tombstones: the entries removed, when and by which policy, kept for a bounded time (migration 0010).

Every removal of an entry's row writes its tombstone in the same transaction (:func:`bury`, called by
:meth:`AdminRepository.delete_entries <cache_server.index.admin.AdminRepository.delete_entries>` and
:meth:`EntryRepository.delete_entry <cache_server.index.entries.EntryRepository.delete_entry>`, which both
require the policy), so a later compile of the key can be explained (:mod:`cache_server.runs.reasons`). A key
stored again keeps its tombstone: the compile that stored it again is what the tombstone explains. A key
removed again gets the newer time and policy.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, select, tuple_
from sqlalchemy.orm import Session

from cache_server.domain import RemovalPolicy
from cache_server.index.database import Database, chunked
from cache_server.index.models import Tombstone

__all__ = ["Removed", "TombstoneInfo", "bury", "prune_tombstones", "tombstones_of"]


@dataclass(frozen=True)
class Removed:
    """An entry whose row a removal deleted: what its tombstone keeps."""

    namespace: str
    key: str
    size: int
    compile_ms: int | None


@dataclass(frozen=True)
class TombstoneInfo:
    """A removed entry: when it went and why."""

    namespace: str
    key: str
    removed_at: dt.datetime
    policy: str
    size: int
    compile_ms: int | None


def bury(
    db: Database, session: Session, removed: Sequence[Removed], policy: RemovalPolicy, when: dt.datetime
) -> None:
    """Write (or renew) the tombstones of ``removed`` in ``session``'s transaction: one statement, compiled
    once and run with many parameter sets (not a multi-row ``VALUES`` built per chunk, whose compiling cost
    more than the writing)."""
    if not removed:
        return
    stmt = db.insert(Tombstone)
    excluded = stmt.excluded
    upsert = stmt.on_conflict_do_update(
        index_elements=["namespace", "key"],
        set_={
            "removed_at": excluded.removed_at,
            "policy": excluded.policy,
            "size": excluded.size,
            "compile_ms": excluded.compile_ms,
        },
    )
    rows = [
        {
            "namespace": r.namespace,
            "key": r.key,
            "removed_at": when,
            "policy": policy,
            "size": r.size,
            "compile_ms": r.compile_ms,
        }
        for r in removed
    ]
    session.connection().execute(upsert, rows)


def tombstones_of(db: Database, namespace: str, keys: Sequence[str]) -> dict[str, TombstoneInfo]:
    """The tombstones of these keys of ``namespace``, by key."""
    found: dict[str, TombstoneInfo] = {}
    with db.reading() as connection:
        for part in chunked(keys):
            rows = connection.execute(
                select(
                    Tombstone.namespace,
                    Tombstone.key,
                    Tombstone.removed_at,
                    Tombstone.policy,
                    Tombstone.size,
                    Tombstone.compile_ms,
                ).where(Tombstone.namespace == namespace, Tombstone.key.in_(part))
            )
            for row in rows:
                found[row.key] = TombstoneInfo(*row)
    return found


def prune_tombstones(db: Database, *, older_than: dt.datetime, keep: int) -> int:
    """Delete the tombstones removed before ``older_than``, then all but the newest ``keep``; returns how many
    went. Newest by removal time, then by namespace and key (descending): a total order, so that ``keep`` of
    the many tombstones one removal writes at one instant (a namespace deleted) stay, not none of them."""
    order = (Tombstone.removed_at, Tombstone.namespace, Tombstone.key)
    with db.transaction() as session:
        gone = _count(session.execute(delete(Tombstone).where(Tombstone.removed_at < older_than)))
        cutoff = session.execute(
            select(*order).order_by(*(column.desc() for column in order)).offset(keep).limit(1)
        ).first()
        if cutoff is not None:  # it and every tombstone after it in that order
            gone += _count(session.execute(delete(Tombstone).where(tuple_(*order) <= tuple_(*cutoff))))
    return gone


def _count(result: object) -> int:
    """The rows a DELETE removed (a CursorResult's rowcount; typed as a plain Result)."""
    return int(getattr(result, "rowcount", 0) or 0)
