"""Quotas: the limits set per namespace and per token, and the usage an upload is compared with.

Usage is read from ``entry_totals`` (kept by triggers, migration 0006): a namespace's few rows (one per token
that stored into it), a token's rows by ``ix_entry_totals_stored_by`` (one per namespace it stored into).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, select, tuple_
from sqlalchemy.orm import Session

from cache_server.index.database import Database
from cache_server.index.models import EntryTotals, Namespace, Quota

__all__ = ["NAMESPACE", "TOKEN", "QuotaRepository", "QuotaRow", "UploadUsage"]

NAMESPACE = "namespace"
TOKEN = "token"


@dataclass(frozen=True)
class QuotaRow:
    """A quota as set, with what its subject stores now."""

    kind: str  # NAMESPACE or TOKEN
    subject: str  # the namespace's name, or the token's id
    max_entries: int | None
    max_bytes: int | None
    entries: int
    bytes: int


@dataclass(frozen=True)
class UploadUsage:
    """What an upload into one namespace by one token is limited by: the quotas that apply (each with its
    subject's usage now), whether the namespace exists, and how many namespaces the token created."""

    quotas: tuple[QuotaRow, ...]
    namespace_exists: bool
    namespaces_created: int


def _usage(session: Session, kind: str, subject: str) -> tuple[int, int]:
    column = EntryTotals.namespace if kind == NAMESPACE else EntryTotals.stored_by
    entries, size = session.execute(
        select(
            func.coalesce(func.sum(EntryTotals.entries), 0), func.coalesce(func.sum(EntryTotals.bytes), 0)
        ).where(column == subject)
    ).one()
    return int(entries), int(size)


def _row(session: Session, quota: Quota) -> QuotaRow:
    usage = _usage(session, quota.kind, quota.subject)
    return QuotaRow(quota.kind, quota.subject, quota.max_entries, quota.max_bytes, *usage)


def _created_by(session: Session, token: str) -> int:
    stmt = select(func.count()).select_from(Namespace).where(Namespace.created_by == token)
    return int(session.scalar(stmt) or 0)


class QuotaRepository:
    """The ``quotas`` table, and the usage its limits are compared with."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def set_quota(
        self, kind: str, subject: str, *, max_entries: int | None, max_bytes: int | None, now: dt.datetime
    ) -> QuotaRow:
        """Set (or replace) the quota of a namespace or token; both limits None removes it."""
        with self._db.transaction() as session:
            if max_entries is None and max_bytes is None:
                session.execute(delete(Quota).where(Quota.kind == kind, Quota.subject == subject))
            else:
                values = {"max_entries": max_entries, "max_bytes": max_bytes, "updated_at": now}
                stmt = self._db.insert(Quota).values(kind=kind, subject=subject, **values)
                session.execute(stmt.on_conflict_do_update(index_elements=["kind", "subject"], set_=values))
            entries, size = _usage(session, kind, subject)
        return QuotaRow(kind, subject, max_entries, max_bytes, entries, size)

    def quotas(self, subjects: Sequence[tuple[str, str]] | None = None) -> list[QuotaRow]:
        """Every quota (or those of these (kind, subject) pairs), with its subject's usage now."""
        stmt = select(Quota).order_by(Quota.kind, Quota.subject)
        if subjects is not None:
            if not subjects:
                return []
            stmt = stmt.where(tuple_(Quota.kind, Quota.subject).in_(list(subjects)))
        with self._db.transaction() as session:
            rows = session.scalars(stmt).all()
            return [
                QuotaRow(
                    row.kind,
                    row.subject,
                    row.max_entries,
                    row.max_bytes,
                    *_usage(session, row.kind, row.subject),
                )
                for row in rows
            ]

    def upload_usage(self, namespace: str, token: str | None, *, count_created: bool) -> UploadUsage:
        """What limits an upload into ``namespace`` by ``token`` (None: auth off): the quotas of both, with
        usage, in one transaction; with ``count_created``, the namespaces the token created (read only when
        the namespace does not exist yet)."""
        subjects = [(NAMESPACE, namespace)] + ([(TOKEN, token)] if token else [])
        with self._db.transaction() as session:
            rows = session.scalars(select(Quota).where(tuple_(Quota.kind, Quota.subject).in_(subjects))).all()
            quotas = tuple(
                QuotaRow(
                    row.kind,
                    row.subject,
                    row.max_entries,
                    row.max_bytes,
                    *_usage(session, row.kind, row.subject),
                )
                for row in rows
            )
            exists = session.get(Namespace, namespace) is not None
            created = 0
            if count_created and token and not exists:
                created = int(
                    session.scalar(
                        select(func.count()).select_from(Namespace).where(Namespace.created_by == token)
                    )
                    or 0
                )
        return UploadUsage(quotas, exists, created)

    def namespaces_created_by(self, token: str) -> int:
        """How many namespaces this token created."""
        with self._db.transaction() as session:
            return _created_by(session, token)
