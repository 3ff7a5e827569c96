"""Quotas: the limits set per namespace and per token, and the usage an upload is compared with.

Usage is read from ``entry_totals`` (kept by triggers, migration 0006): a namespace's few rows (one per token
that stored into it), a token's rows by ``ix_entry_totals_stored_by`` (one per namespace it stored into).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, delete, func, select, tuple_
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


_QUOTAS = select(Quota.kind, Quota.subject, Quota.max_entries, Quota.max_bytes)
_USAGE = select(
    func.coalesce(func.sum(EntryTotals.entries), 0), func.coalesce(func.sum(EntryTotals.bytes), 0)
)
_NAMESPACE_USAGE = _USAGE.where(EntryTotals.namespace == bindparam("subject"))
_TOKEN_USAGE = _USAGE.where(EntryTotals.stored_by == bindparam("subject"))  # ix_entry_totals_stored_by
_EXISTS = select(Namespace.name).where(Namespace.name == bindparam("name"))
_APPLYING = _QUOTAS.where(
    ((Quota.kind == NAMESPACE) & (Quota.subject == bindparam("name")))
    | ((Quota.kind == TOKEN) & (Quota.subject == bindparam("token")))
)


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
        usage; with ``count_created``, the namespaces the token created (read only when the namespace does
        not exist yet). The lookup of every upload: Core statements on one connection, the usage read only
        for a quota that is set."""
        with self._db.reading() as connection:
            # no token: "" matches no token quota (a quota is set on a real token's id)
            rows = connection.execute(_APPLYING, {"name": namespace, "token": token or ""}).all()
            quotas = []
            for kind, subject, max_entries, max_bytes in rows:
                usage = _NAMESPACE_USAGE if kind == NAMESPACE else _TOKEN_USAGE
                entries, size = connection.execute(usage, {"subject": subject}).one()
                quotas.append(QuotaRow(kind, subject, max_entries, max_bytes, int(entries), int(size)))
            exists = connection.execute(_EXISTS, {"name": namespace}).first() is not None
            created = 0
            if count_created and token and not exists:
                stmt = select(func.count()).select_from(Namespace).where(Namespace.created_by == token)
                created = int(connection.execute(stmt).scalar() or 0)
        return UploadUsage(tuple(quotas), exists, created)

    def namespaces_created_by(self, token: str) -> int:
        """How many namespaces this token created."""
        with self._db.transaction() as session:
            return _created_by(session, token)
