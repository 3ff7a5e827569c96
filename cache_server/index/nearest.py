"""The candidates for "nearest namespaces": populated namespaces of one framework, most recently used first.

One query: the service compares fingerprints in Python, at most ``XLA_CACHE_NEAREST_CANDIDATES`` of them.
The query itself reads the framework and last use of every namespace row, and the stored totals of the
populated ones by primary key (no index orders namespaces by use): with 10,000 namespaces a whole answer
took 30-60 ms on SQLite and 90-140 ms on PostgreSQL, on a busy 2-core machine.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from cache_server.index.database import Database
from cache_server.index.models import EntryTotals, Namespace
from cache_server.index.patterns import scope_matches

__all__ = ["Candidate", "NearestRepository"]


@dataclass(frozen=True)
class Candidate:
    """A populated namespace: its fingerprint, entries stored now and last use."""

    namespace: str
    fingerprint: dict[str, Any]
    entries: int
    last_used_at: dt.datetime


class NearestRepository:
    """Reads the ``namespaces`` table and the stored totals for :mod:`cache_server.service.nearest`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def candidates(
        self,
        framework: str,
        *,
        exclude: str,
        limit: int,
        patterns: Sequence[str] | None = None,
    ) -> list[Candidate]:
        """At most ``limit`` namespaces other than ``exclude`` whose fingerprint's framework is
        ``framework`` and that store at least one entry, most recently used first. ``patterns`` (a token's
        namespace patterns; None: every namespace) narrow them in SQL, exactly as the token's check
        (:func:`~cache_server.index.patterns.scope_matches`), before the limit."""
        # Per candidate row, not over the whole table: the totals are read by their primary key.
        entries = (
            select(func.sum(EntryTotals.entries))
            .where(EntryTotals.namespace == Namespace.name)
            .correlate(Namespace)
            .scalar_subquery()
        )
        query = (
            select(Namespace.name, Namespace.fingerprint, entries, Namespace.last_used_at)
            .where(
                entries > 0,
                Namespace.name != exclude,
                Namespace.fingerprint["framework"].as_string() == framework,
            )
            .order_by(Namespace.last_used_at.desc(), Namespace.name)
            .limit(limit)
        )
        if patterns is not None:
            query = query.where(scope_matches(self._db, Namespace.name, patterns))
        with self._db.transaction() as session:
            rows = session.execute(query).all()
        return [
            Candidate(namespace=name, fingerprint=dict(fp or {}), entries=int(entries), last_used_at=used)
            for name, fp, entries, used in rows
        ]
