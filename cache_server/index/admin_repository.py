"""The admin side's queries: stats, the daily rollup, parsed graphs, eviction and reconciliation.

A subclass of :class:`~cache_server.index.repository.IndexRepository` sharing its engine, so every query
still lives in the index package and runs in the same short transactions.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError

from cache_server.index.daily import DAILY_COUNTERS, bump_daily, today
from cache_server.index.models import DailyStats, Entry, EntryGraph, Namespace
from cache_server.index.repository import IN_CHUNK, IndexRepository

__all__ = [
    "AdminRepository",
    "DailyRow",
    "EntryRef",
    "GraphGroup",
    "GraphRecord",
    "NamespaceRow",
]


@dataclass(frozen=True)
class NamespaceRow:
    """A namespace's persistent counters with what it stores now."""

    name: str
    labels: dict[str, str]
    created_at: dt.datetime
    last_used_at: dt.datetime
    entries: int
    bytes: int
    hits: int
    misses: int
    uploads: int
    evictions: int
    bytes_served: int
    compile_ms_saved: int


@dataclass(frozen=True)
class DailyRow:
    """The counters of one day, summed over the namespaces asked for."""

    day: dt.date
    hits: int
    misses: int
    uploads: int
    evictions: int
    bytes_served: int
    bytes_uploaded: int
    compile_ms_saved: int


@dataclass(frozen=True)
class EntryRef:
    """An entry as eviction sees it."""

    namespace: str
    key: str
    size: int
    last_access_at: dt.datetime


@dataclass(frozen=True)
class GraphRecord:
    """What parsing one entry found; ``module`` None means "not parseable"."""

    namespace: str
    key: str
    module: str | None
    signature: str | None = None
    shapes: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class GraphGroup:
    """Stored entries of one HLO module in one namespace, and how many distinct shape signatures they have."""

    namespace: str
    module: str
    variants: int
    entries: int
    bytes: int
    hits: int
    source: str | None
    examples: list[str]


class AdminRepository(IndexRepository):
    """Queries of the admin side (stats, graphs, eviction, gc)."""

    # -- stats ------------------------------------------------------------------------------------------
    def namespace_rows(self) -> list[NamespaceRow]:
        """Every namespace with its counters and its stored entries and bytes, largest first."""
        stored = (
            select(
                Entry.namespace.label("namespace"),
                func.count().label("entries"),
                func.sum(Entry.size).label("bytes"),
            )
            .group_by(Entry.namespace)
            .subquery()
        )
        stmt = (
            select(Namespace, stored.c.entries, stored.c.bytes)
            .outerjoin(stored, stored.c.namespace == Namespace.name)
            .order_by(func.coalesce(stored.c.bytes, 0).desc(), Namespace.name)
        )
        with self._tx() as session:
            return [
                NamespaceRow(
                    name=ns.name,
                    labels=dict(ns.labels or {}),
                    created_at=ns.created_at,
                    last_used_at=ns.last_used_at,
                    entries=int(entries or 0),
                    bytes=int(size or 0),
                    hits=ns.hits,
                    misses=ns.misses,
                    uploads=ns.uploads,
                    evictions=ns.evictions,
                    bytes_served=ns.bytes_served,
                    compile_ms_saved=ns.compile_ms_saved,
                )
                for ns, entries, size in session.execute(stmt)
            ]

    def stored_by_namespace(self) -> dict[str, tuple[int, int]]:
        """Entries and bytes stored, per namespace (for the gauges and the budgets)."""
        stmt = select(Entry.namespace, func.count(), func.sum(Entry.size)).group_by(Entry.namespace)
        with self._tx() as session:
            return {ns: (int(count), int(size or 0)) for ns, count, size in session.execute(stmt)}

    def daily(self, since: dt.date, namespace: str | None = None) -> list[DailyRow]:
        """The rollup from ``since`` on, one row per day that has any counts, oldest first."""
        sums = [func.sum(getattr(DailyStats, name)) for name in DAILY_COUNTERS]
        stmt = select(DailyStats.day, *sums).where(DailyStats.day >= since).group_by(DailyStats.day)
        if namespace is not None:
            stmt = stmt.where(DailyStats.namespace == namespace)
        with self._tx() as session:
            rows = session.execute(stmt.order_by(DailyStats.day)).all()
        return [
            DailyRow(
                row[0], **{name: int(value or 0) for name, value in zip(DAILY_COUNTERS, row[1:], strict=True)}
            )
            for row in rows
        ]

    # -- graphs -----------------------------------------------------------------------------------------
    def unparsed_entries(self, limit: int) -> list[tuple[str, str]]:
        """Entries nobody has tried to parse yet."""
        stmt = (
            select(Entry.namespace, Entry.key)
            .outerjoin(EntryGraph, (EntryGraph.namespace == Entry.namespace) & (EntryGraph.key == Entry.key))
            .where(EntryGraph.key.is_(None))
            .limit(limit)
        )
        with self._tx() as session:
            return [(ns, key) for ns, key in session.execute(stmt)]

    def record_graph(self, record: GraphRecord) -> bool:
        """Keep what parsing found. False if the entry is gone by now (evicted while it was parsed)."""
        try:
            with self._tx() as session:
                stmt = self._insert()(EntryGraph).values(
                    namespace=record.namespace,
                    key=record.key,
                    module=record.module,
                    signature=record.signature,
                    shapes=record.shapes,
                    source=record.source,
                )
                session.execute(stmt.on_conflict_do_nothing(index_elements=["namespace", "key"]))
        except IntegrityError:
            return False
        return True

    def top_graphs(self, limit: int, namespace: str | None = None, examples: int = 3) -> list[GraphGroup]:
        """The modules with the most distinct shape signatures, with a few of their shapes as examples."""
        joined = (EntryGraph.namespace == Entry.namespace) & (EntryGraph.key == Entry.key)
        variants = func.count(func.distinct(EntryGraph.signature))
        stmt = (
            select(
                EntryGraph.namespace,
                EntryGraph.module,
                variants,
                func.count(),
                func.sum(Entry.size),
                func.sum(Entry.hits),
                func.max(EntryGraph.source),
            )
            .join(Entry, joined)
            .where(EntryGraph.module.is_not(None))
            .group_by(EntryGraph.namespace, EntryGraph.module)
            .order_by(variants.desc(), func.count().desc(), EntryGraph.namespace, EntryGraph.module)
            .limit(limit)
        )
        if namespace is not None:
            stmt = stmt.where(EntryGraph.namespace == namespace)
        groups: list[GraphGroup] = []
        with self._tx() as session:
            for ns, module, n_variants, n_entries, size, hits, source in session.execute(stmt).all():
                shown = session.scalars(
                    select(EntryGraph.shapes)
                    .where(EntryGraph.namespace == ns, EntryGraph.module == module)
                    .group_by(EntryGraph.shapes)
                    .order_by(EntryGraph.shapes)
                    .limit(examples)
                ).all()
                groups.append(
                    GraphGroup(
                        namespace=ns,
                        module=str(module),
                        variants=int(n_variants),
                        entries=int(n_entries),
                        bytes=int(size or 0),
                        hits=int(hits or 0),
                        source=source,
                        examples=[text for text in shown if text],
                    )
                )
        return groups

    # -- eviction ---------------------------------------------------------------------------------------
    def iter_lru(self, *, namespace: str | None = None) -> Iterator[EntryRef]:
        """Entries least recently used first, streamed from one read transaction.

        The caller may delete what it has seen while it iterates (other transactions; WAL on SQLite).
        Closing the iterator early ends the transaction.
        """
        stmt = select(Entry.namespace, Entry.key, Entry.size, Entry.last_access_at).order_by(
            Entry.last_access_at, Entry.namespace, Entry.key
        )
        if namespace is not None:
            stmt = stmt.where(Entry.namespace == namespace)
        with self._tx() as session:
            # Core rows straight off the cursor: this may stream millions of them.
            for row in session.connection().execute(stmt.execution_options(yield_per=2000)):
                yield EntryRef(*row)

    def delete_entries(self, refs: Iterable[tuple[str, str]], *, evicted: bool) -> list[tuple[str, str, int]]:
        """Delete these entries' rows in one transaction; returns the (namespace, key, size) really deleted.

        With ``evicted`` the namespaces and the daily rollup count them as evictions. Rows another process
        deleted first are not returned, so each blob is removed (and counted) by exactly one caller.
        """
        by_namespace: dict[str, list[str]] = defaultdict(list)
        for namespace, key in refs:
            by_namespace[namespace].append(key)
        gone: list[tuple[str, str, int]] = []
        with self._tx() as session:
            for namespace, keys in by_namespace.items():
                removed: list[tuple[str, str, int]] = []
                for start in range(0, len(keys), IN_CHUNK):
                    part = keys[start : start + IN_CHUNK]
                    result = session.execute(
                        delete(Entry)
                        .where(Entry.namespace == namespace, Entry.key.in_(part))
                        .returning(Entry.namespace, Entry.key, Entry.size)
                    )
                    removed.extend((ns, key, int(size)) for ns, key, size in result)
                if evicted and removed:
                    session.execute(
                        update(Namespace)
                        .where(Namespace.name == namespace)
                        .values(evictions=Namespace.evictions + len(removed))
                    )
                    bump_daily(session, self._insert(), namespace, today(), evictions=len(removed))
                gone.extend(removed)
        return gone

    def keys_page(self, namespace: str, *, after: str | None, limit: int) -> list[tuple[str, dt.datetime]]:
        """A page of one namespace's keys in key order, with their creation times."""
        stmt = select(Entry.key, Entry.created_at).where(Entry.namespace == namespace)
        if after is not None:
            stmt = stmt.where(Entry.key > after)
        with self._tx() as session:
            return [(key, created) for key, created in session.execute(stmt.order_by(Entry.key).limit(limit))]

    def namespace_names(self) -> list[str]:
        """Every namespace's name."""
        with self._tx() as session:
            return list(session.scalars(select(Namespace.name).order_by(Namespace.name)))

    def drop_namespace_row(self, namespace: str) -> bool:
        """Remove a namespace's row (its entries' rows must be gone already). True if it was there."""
        with self._tx() as session:
            result = session.execute(
                delete(Namespace).where(Namespace.name == namespace).returning(Namespace.name)
            )
            return result.first() is not None

    def present_keys(self, namespace: str, keys: Sequence[str]) -> set[str]:
        """Which of ``keys`` have a row."""
        return set(keys) - set(self.missing_keys(namespace, keys))
