"""The admin side's queries: stats, the daily rollup, eviction and reconciliation (the parsed graphs are
:mod:`.graph_records`' own repository).

Composed over the same :class:`~cache_server.index.database.Database` as the other repositories; each method
runs in its own short transaction and returns domain objects, never ORM rows.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

from sqlalchemy import ColumnElement, Select, Table, bindparam, delete, func, select, tuple_, update

from cache_server.domain import COUNTERS, Counters, EntryInfo, NamespaceInfo, RemovalPolicy
from cache_server.index.counters import add_counts
from cache_server.index.database import Database, chunked
from cache_server.index.entries import entry_info
from cache_server.index.models import (
    NO_TOKEN,
    DailyStats,
    Entry,
    EntryTotals,
    GraphCount,
    Namespace,
)
from cache_server.index.namespaces import namespace_info, stored_per_namespace
from cache_server.index.tombstones import Removed, bury

__all__ = ["AdminRepository", "EvictionCandidate"]


_LRU = select(Entry.namespace, Entry.key, Entry.size, Entry.last_access_at).order_by(
    Entry.last_access_at, Entry.namespace, Entry.key
)


def _signed_by(signer: str | None) -> ColumnElement[bool]:
    """The entries this key id signed (None: the unsigned ones)."""
    return Entry.signer.is_(None) if signer is None else Entry.signer == signer


def _stored_by(token_ids: Sequence[str]) -> ColumnElement[bool]:
    """The entries these tokens stored."""
    return Entry.stored_by.in_(list(token_ids))


@dataclass(frozen=True)
class EvictionCandidate:
    """An entry as eviction (and a token's purge) sees it: its size and when it was last used, streamed least
    recently used first (unlike :class:`cache_server.domain.EntryRef`, the row manifests and bundles read)."""

    namespace: str
    key: str
    size: int
    last_access_at: dt.datetime


class AdminRepository:
    """Queries of the admin side: stats, eviction, gc and packing."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- stats ------------------------------------------------------------------------------------------
    def namespace_rows(self) -> list[NamespaceInfo]:
        """Every namespace with its counters and its stored entries and bytes, largest first."""
        stored = stored_per_namespace().subquery()
        stmt = (
            select(Namespace, stored.c.entries, stored.c.bytes)
            .outerjoin(stored, stored.c.namespace == Namespace.name)
            .order_by(func.coalesce(stored.c.bytes, 0).desc(), Namespace.name)
        )
        with self._db.transaction() as session:
            return [
                namespace_info(row, int(entries or 0), int(size or 0))
                for row, entries, size in session.execute(stmt)
            ]

    def namespace_page(
        self, *, after: tuple[int, str] | None, limit: int, namespace: str | None = None
    ) -> list[NamespaceInfo]:
        """A page of :meth:`namespace_rows` (largest first, then by name): the ``limit`` namespaces after
        the one with ``after`` = (its stored bytes, its name); only ``namespace`` if given."""
        stored = stored_per_namespace().subquery()
        size = func.coalesce(stored.c.bytes, 0)
        stmt = (
            select(Namespace, stored.c.entries, stored.c.bytes)
            .outerjoin(stored, stored.c.namespace == Namespace.name)
            .order_by(size.desc(), Namespace.name)
            .limit(limit)
        )
        if namespace is not None:
            stmt = stmt.where(Namespace.name == namespace)
        if after is not None:
            last_bytes, last_name = after
            stmt = stmt.where((size < last_bytes) | ((size == last_bytes) & (Namespace.name > last_name)))
        with self._db.transaction() as session:
            return [
                namespace_info(row, int(entries or 0), int(total or 0))
                for row, entries, total in session.execute(stmt)
            ]

    def namespace_totals(self, namespace: str | None = None) -> tuple[int, int, int, Counters]:
        """How many namespaces there are (1 or 0 with ``namespace``), the entries and bytes they store, and
        their counters summed: a few aggregates, whatever the number of namespaces."""
        counters = select(func.count(), *(func.sum(getattr(Namespace, name)) for name in COUNTERS))
        stored = select(func.sum(EntryTotals.entries), func.sum(EntryTotals.bytes))
        if namespace is not None:
            counters = counters.where(Namespace.name == namespace)
            stored = stored.where(EntryTotals.namespace == namespace)
        with self._db.transaction() as session:
            count, *sums = session.execute(counters).one()
            entries, size = session.execute(stored).one()
        summed = Counters.of({name: int(value or 0) for name, value in zip(COUNTERS, sums, strict=True)})
        return int(count), int(entries or 0), int(size or 0), summed

    def namespace_exists(self, namespace: str) -> bool:
        with self._db.transaction() as session:
            return session.get(Namespace, namespace) is not None

    def stored_by_namespace(self) -> dict[str, tuple[int, int]]:
        """Entries and bytes stored, per namespace that has any (for the gauges and the budgets)."""
        stmt = stored_per_namespace()
        with self._db.transaction() as session:
            return {ns: (int(count), int(size)) for ns, count, size in session.execute(stmt) if count}

    def stored_by_token(self) -> dict[str | None, tuple[int, int]]:
        """Entries and bytes stored now, per id of the token that stored them (None: no token, auth off)."""
        stmt = select(
            EntryTotals.stored_by, func.sum(EntryTotals.entries), func.sum(EntryTotals.bytes)
        ).group_by(EntryTotals.stored_by)
        with self._db.transaction() as session:
            return {
                (token if token != NO_TOKEN else None): (int(count), int(size))
                for token, count, size in session.execute(stmt)
                if count
            }

    def counted_totals(self) -> dict[tuple[str, str | None], tuple[int, int]]:
        """Entries and bytes per namespace and token, counted afresh over every entry (slow: for checks of
        the ``entry_totals`` the triggers keep)."""
        stmt = select(Entry.namespace, Entry.stored_by, func.count(), func.sum(Entry.size)).group_by(
            Entry.namespace, Entry.stored_by
        )
        with self._db.transaction() as session:
            return {(ns, token): (int(n), int(size)) for ns, token, n, size in session.execute(stmt)}

    def kept_totals(self) -> dict[tuple[str, str | None], tuple[int, int]]:
        """The ``entry_totals`` rows that are not zero, keyed like :meth:`counted_totals`."""
        with self._db.transaction() as session:
            rows = session.scalars(select(EntryTotals)).all()
        return {
            (row.namespace, row.stored_by if row.stored_by != NO_TOKEN else None): (row.entries, row.bytes)
            for row in rows
            if row.entries or row.bytes
        }

    def daily(self, since: dt.date, namespace: str | None = None) -> dict[dt.date, Counters]:
        """The rollup from ``since`` on, summed over the namespaces (or of one): the days that have counts."""
        sums = [func.sum(getattr(DailyStats, name)).label(name) for name in COUNTERS]
        stmt = select(DailyStats.day, *sums).where(DailyStats.day >= since).group_by(DailyStats.day)
        if namespace is not None:
            stmt = stmt.where(DailyStats.namespace == namespace)
        with self._db.transaction() as session:
            rows = session.execute(stmt).all()
        return {row.day: Counters.of(dict(row._mapping)) for row in rows}

    # -- eviction ---------------------------------------------------------------------------------------
    def iter_lru(self, *, namespace: str | None = None) -> Iterator[EvictionCandidate]:
        """Entries least recently used first, streamed from one read transaction.

        The caller may delete what it has seen while it iterates (other transactions; WAL on SQLite).
        Closing the iterator early ends the transaction.
        """
        stmt = _LRU
        if namespace is not None:
            stmt = stmt.where(Entry.namespace == namespace)
        return self._stream(stmt)

    def stored_by_signer(self) -> dict[str | None, tuple[int, int]]:
        """Entries and bytes per signer key id (None: unsigned). A scan of the entries (grouped on
        ``ix_entries_signer``), not the kept totals: an admin's question, not every request's."""
        stmt = select(Entry.signer, func.count(), func.coalesce(func.sum(Entry.size), 0)).group_by(
            Entry.signer
        )
        with self._db.reading() as connection:
            return {signer: (int(count), int(size)) for signer, count, size in connection.execute(stmt)}

    def iter_signed_by(self, signer: str | None) -> Generator[EvictionCandidate, None, None]:
        """The entries this key signed (None: the unsigned ones), least recently used first, streamed like
        :meth:`iter_lru`."""
        return self._stream(_LRU.where(_signed_by(signer)))

    def count_signed_by(self, signer: str | None) -> int:
        """How many entries this key signed (None: unsigned), counted on ``ix_entries_signer``."""
        return self._count(_signed_by(signer))

    def count_in_namespace(self, namespace: str) -> int:
        """How many entries the namespace holds, counted on its rows (not the kept totals)."""
        return self._count(Entry.namespace == namespace)

    def iter_stored_by(self, token_ids: Sequence[str]) -> Generator[EvictionCandidate, None, None]:
        """The entries these tokens stored, least recently used first, streamed like :meth:`iter_lru`."""
        return self._stream(_LRU.where(_stored_by(token_ids)))

    def count_stored_by(self, token_ids: Sequence[str]) -> int:
        """How many entries these tokens stored, counted on ``ix_entries_stored_by``."""
        return self._count(_stored_by(token_ids))

    def _count(self, condition: ColumnElement[bool]) -> int:
        """How many entries rows meet ``condition``."""
        with self._db.reading() as connection:
            return int(connection.execute(select(func.count()).where(condition)).scalar() or 0)

    def _stream(self, stmt: Select[str, str, int, dt.datetime]) -> Generator[EvictionCandidate, None, None]:
        # Core rows straight off the cursor: this may stream millions of them. The cursor is a server-side
        # one on PostgreSQL: closed here when the caller stops early, too.
        with (
            self._db.transaction(streaming=True) as session,
            session.connection().execute(stmt.execution_options(yield_per=2000)) as result,
        ):
            for row in result:
                yield EvictionCandidate(*row)

    def delete_entries(
        self,
        refs: Iterable[tuple[str, str]],
        *,
        policy: RemovalPolicy,
        when: dt.datetime,
        count_evictions: bool = False,
    ) -> list[tuple[str, str, int]]:
        """Delete these entries' rows in one transaction, with a tombstone for each saying ``when`` and
        by which ``policy`` it went; returns the (namespace, key, size) really deleted.

        With ``count_evictions`` the namespaces and that day's rollup count them as evictions. Rows another
        process deleted first are not returned, so each blob is removed (and counted) by exactly one caller.
        """
        by_namespace: dict[str, list[str]] = defaultdict(list)
        for namespace, key in refs:
            by_namespace[namespace].append(key)
        gone: list[tuple[str, str, int]] = []
        with self._db.transaction() as session:
            for namespace, keys in by_namespace.items():
                removed: list[Removed] = []
                for part in chunked(keys):
                    result = session.execute(
                        delete(Entry)
                        .where(Entry.namespace == namespace, Entry.key.in_(part))
                        .returning(Entry.namespace, Entry.key, Entry.size, Entry.compile_time_ms)
                    )
                    removed.extend(Removed(ns, key, int(size), ms) for ns, key, size, ms in result)
                if count_evictions and removed:
                    add_counts(self._db, session, namespace, when.date(), evictions=len(removed))
                bury(self._db, session, removed, policy, when)
                gone.extend((r.namespace, r.key, r.size) for r in removed)
        return gone

    def keys_page(self, namespace: str, *, after: str | None, limit: int) -> list[tuple[str, dt.datetime]]:
        """A page of one namespace's keys in key order, with their creation times."""
        stmt = select(Entry.key, Entry.created_at).where(Entry.namespace == namespace)
        if after is not None:
            stmt = stmt.where(Entry.key > after)
        with self._db.transaction() as session:
            return [(key, created) for key, created in session.execute(stmt.order_by(Entry.key).limit(limit))]

    def namespace_names(self) -> list[str]:
        """Every namespace's name."""
        with self._db.transaction() as session:
            return list(session.scalars(select(Namespace.name).order_by(Namespace.name)))

    def drop_namespace_row(self, namespace: str) -> bool:
        """Remove a namespace's row if it holds no entry; True if this call removed it.

        Uploads keep committing while a namespace is deleted, and the foreign key from ``entries`` cascades:
        a row dropped under an entry just committed would take that acknowledged entry with it, with no
        tombstone. So the row goes only in a statement that finds no entry under it, taken after the row is
        locked: on PostgreSQL ``FOR UPDATE`` waits for every upload whose entry's foreign key check holds the
        row (``FOR KEY SHARE``) and makes the next ones wait, and the ``DELETE`` (a new snapshot) then sees
        the entries of those that committed; an upload that waited finds the row gone and makes it anew
        (:meth:`EntryRepository.record_new_entries
        <cache_server.index.entries.EntryRepository.record_new_entries>`). SQLite runs one writer at a time.
        """
        with self._db.transaction() as session:
            session.execute(select(Namespace.name).where(Namespace.name == namespace).with_for_update())
            holds_none = ~select(Entry.key).where(Entry.namespace == namespace).exists()
            result = session.execute(
                delete(Namespace).where(Namespace.name == namespace, holds_none).returning(Namespace.name)
            )
            if result.first() is None:
                return False
            session.execute(delete(EntryTotals).where(EntryTotals.namespace == namespace))
            session.execute(delete(GraphCount).where(GraphCount.namespace == namespace))
            return True

    def referenced_packs(self, pack_ids: Sequence[str]) -> set[str]:
        """Which of these packs some row still points into."""
        found: set[str] = set()
        with self._db.transaction() as session:
            for part in chunked(list(dict.fromkeys(pack_ids))):
                found.update(
                    pack
                    for pack in session.scalars(select(Entry.pack).where(Entry.pack.in_(part)).distinct())
                    if pack is not None
                )
        return found

    # -- packing later -----------------------------------------------------------------------------------
    def loose_entries(self, *, max_size: int, after: tuple[str, str] | None, limit: int) -> list[EntryInfo]:
        """Up to ``limit`` entries of at most ``max_size`` bytes whose row points into no pack, in (namespace,
        key) order after ``after`` (a page of them: pass the last one's namespace and key for the next)."""
        stmt = select(Entry).where(Entry.pack.is_(None), Entry.size <= max_size)
        if after is not None:
            stmt = stmt.where(tuple_(Entry.namespace, Entry.key) > tuple_(*after))
        with self._db.transaction() as session:
            rows = session.scalars(stmt.order_by(Entry.namespace, Entry.key).limit(limit))
            return [entry_info(row) for row in rows]

    def place_copies(self, pack_id: str, copies: Sequence[tuple[EntryInfo, int]]) -> int:
        """Point the rows of these entries (each with its copy's offset in pack ``pack_id``) into the pack,
        where a row still has no pack and the same digest (a row deleted, stored again with other bytes or
        packed by another process meanwhile is left as it is); returns how many rows now point into it."""
        if not copies:
            return 0
        table = cast(Table, Entry.__table__)
        stmt = (
            update(table)
            .where(
                table.c.namespace == bindparam("b_namespace"),
                table.c.key == bindparam("b_key"),
                table.c.sha256 == bindparam("b_sha256"),
                table.c.pack.is_(None),
            )
            .values(pack=pack_id, pack_offset=bindparam("b_offset"))
        )
        params = [
            {"b_namespace": e.namespace, "b_key": e.key, "b_sha256": e.sha256, "b_offset": offset}
            for e, offset in copies
        ]
        with self._db.transaction() as session:
            session.connection().execute(stmt, params)
            placed = session.scalar(select(func.count()).select_from(Entry).where(Entry.pack == pack_id))
            return int(placed or 0)

    def present_keys(self, namespace: str, keys: Sequence[str]) -> set[str]:
        """Which of ``keys`` have a row."""
        present: set[str] = set()
        with self._db.transaction() as session:
            for part in chunked(list(dict.fromkeys(keys))):
                present.update(
                    session.scalars(
                        select(Entry.key).where(Entry.namespace == namespace, Entry.key.in_(part))
                    )
                )
        return present
