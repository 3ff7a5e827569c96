"""The ``namespaces`` rows: creating and updating one, reading one with what it stores now, and the empty
rows an upload adds for namespaces it is the first to store into (:func:`add_namespaces`, in the upload's
own transaction). :class:`NamespaceRepository` is the namespaces' repository."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Select, func, select, update
from sqlalchemy.orm import Session

from cache_server.domain import COUNTERS, Counters, NamespaceInfo
from cache_server.index.database import Database
from cache_server.index.models import EntryTotals, Namespace

__all__ = ["NamespaceRepository", "add_namespaces", "namespace_info", "stored_per_namespace"]


def stored_per_namespace() -> Select[str, int, int]:
    """Entries and bytes stored, per namespace: a sum over its few ``entry_totals`` rows (one per token)."""
    return select(
        EntryTotals.namespace.label("namespace"),
        func.sum(EntryTotals.entries).label("entries"),
        func.sum(EntryTotals.bytes).label("bytes"),
    ).group_by(EntryTotals.namespace)


def namespace_info(row: Namespace, entries: int, size: int) -> NamespaceInfo:
    """The domain object of a ``namespaces`` row, with what it stores now."""
    return NamespaceInfo(
        name=row.name,
        fingerprint=dict(row.fingerprint or {}),
        labels=dict(row.labels or {}),
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        entries=entries,
        bytes=size,
        counters=Counters.of({name: getattr(row, name) for name in COUNTERS}),
    )


def add_namespaces(
    db: Database, session: Session, first_seen: Mapping[str, dt.datetime], created_by: str | None = None
) -> None:
    """Insert an empty row for each namespace that has none, first seen at the given time (created by
    the token with id ``created_by``, if any)."""
    if not first_seen:
        return
    rows: list[dict[str, Any]] = [
        {
            "name": name,
            "fingerprint": {},
            "labels": {},
            "created_at": at,
            "last_used_at": at,
            "created_by": created_by,
        }
        for name, at in first_seen.items()
    ]
    session.execute(db.insert(Namespace).values(rows).on_conflict_do_nothing(index_elements=["name"]))


class NamespaceRepository:
    """Queries of the ``namespaces`` table, over the shared :class:`Database`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def upsert_namespace(
        self,
        name: str,
        fingerprint: Mapping[str, Any],
        labels: Mapping[str, str],
        *,
        now: dt.datetime,
        created_by: str | None = None,
    ) -> tuple[NamespaceInfo, bool]:
        """Create the namespace or replace its fingerprint and labels. Returns it and whether it is new.
        ``created_by``: the id of the token creating it (kept only when it is new)."""
        with self._db.transaction() as session:
            stmt = self._db.insert(Namespace).values(
                name=name,
                fingerprint=dict(fingerprint),
                labels=dict(labels),
                created_at=now,
                last_used_at=now,
                created_by=created_by,
            )
            inserted = stmt.on_conflict_do_nothing(index_elements=["name"]).returning(Namespace.name)
            created = session.execute(inserted).first() is not None
            if not created:
                session.execute(
                    update(Namespace)
                    .where(Namespace.name == name)
                    .values(fingerprint=dict(fingerprint), labels=dict(labels), last_used_at=now)
                )
            info = self._namespace(session, name)
        assert info is not None  # written in this transaction
        return info, created

    def get_namespace(self, name: str) -> NamespaceInfo | None:
        """The namespace with its entry count and stored bytes, or None."""
        with self._db.transaction() as session:
            return self._namespace(session, name)

    @staticmethod
    def _namespace(session: Session, name: str) -> NamespaceInfo | None:
        row = session.get(Namespace, name)
        if row is None:
            return None
        count, total = session.execute(
            select(
                func.coalesce(func.sum(EntryTotals.entries), 0), func.coalesce(func.sum(EntryTotals.bytes), 0)
            ).where(EntryTotals.namespace == name)
        ).one()
        return namespace_info(row, int(count), int(total))
