"""Entries: the queries of the cache service (and of reindex). The namespace rows (:mod:`.namespaces`) and the
change feed (:mod:`.feed`) have repositories of their own over the same database; an entry's writes add the
namespace rows and feed rows they need in their own transaction.

Each public method runs in its own short transaction of the shared :class:`Database`, takes the times it
writes from its caller (the services own the clock), and returns domain objects, never ORM rows.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, TypeVar, cast

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cache_server.domain import COUNTERS, Counters, EntryInfo, EntryRef, RemovalPolicy
from cache_server.errors import IndexUnavailable
from cache_server.index.counters import add_counts
from cache_server.index.database import Database, chunked, foreign_key_violated
from cache_server.index.models import Entry, EntryFeed
from cache_server.index.namespaces import add_namespaces
from cache_server.index.tombstones import Removed, bury

__all__ = [
    "NAMESPACE_RACES",
    "AccessDelta",
    "EntryRecord",
    "EntryRepository",
    "entry_info",
]

T = TypeVar("T")
log = logging.getLogger(__name__)

NAMESPACE_RACES = 3
"""How many times one transaction of entries' rows is tried when a namespace's delete drops the row of their
namespace each time in between (``EntryRepository._under_namespaces``), before the upload is answered 503."""


@dataclass
class AccessDelta:
    """Hits on one entry since the last flush."""

    hits: int = 0
    bytes_served: int = 0
    last_access: dt.datetime | None = None
    live: int = 0  # of the hits, deliveries to a following job

    def merge(self, other: AccessDelta) -> None:
        """Add ``other``'s hits and bytes; keep the later access time."""
        self.hits += other.hits
        self.live += other.live
        self.bytes_served += other.bytes_served
        if other.last_access is not None and (
            self.last_access is None or other.last_access > self.last_access
        ):
            self.last_access = other.last_access


@dataclass(frozen=True)
class EntryRecord:
    """An entry's row as written: by an upload, or rebuilt from its blob (see
    :mod:`cache_server.admin.reindex`)."""

    namespace: str
    key: str
    size: int
    sha256: str
    created_at: dt.datetime
    compile_time_ms: int | None = None
    uploader: str | None = None
    stored_by: str | None = None
    pack: str | None = None  # where a copy of the bytes lies in a pack, if one does
    pack_offset: int | None = None
    signer: str | None = None  # the signature's key id, if signed
    signature: str | None = None  # "<key id>:<base64>" (cache_protocol.signing)

    def row(self) -> dict[str, Any]:
        """The ``entries`` row of a new entry: never used yet."""
        row = {field.name: getattr(self, field.name) for field in fields(self)}  # asdict deep-copies: slow
        return {**row, "last_access_at": self.created_at, "hits": 0}


def entry_info(row: Entry) -> EntryInfo:
    """The domain object of an ``entries`` row (its fields are columns of the row)."""
    return EntryInfo(**{field.name: getattr(row, field.name) for field in fields(EntryInfo)})


_ENTRY_COLUMNS = select(*(getattr(Entry, field.name) for field in fields(EntryInfo)))  # as EntryInfo(*row)
_REF_COLUMNS = [getattr(Entry, name) for name in EntryRef._fields]  # as EntryRef(*row)
_REFS = select(*_REF_COLUMNS)
_ONE_ENTRY = _ENTRY_COLUMNS.where(Entry.namespace == bindparam("namespace"), Entry.key == bindparam("key"))
_ENTRIES = cast(Table, Entry.__table__)
_FEED = cast(Table, EntryFeed.__table__)
_ONE_ROW = (_ENTRIES.c.namespace == bindparam("b_namespace")) & (_ENTRIES.c.key == bindparam("b_key"))
_ADD_HITS = update(_ENTRIES).where(_ONE_ROW).values(hits=_ENTRIES.c.hits + bindparam("b_hits"))
_ADD_HITS_AND_ACCESS = _ADD_HITS.values(last_access_at=bindparam("b_last", type_=Entry.last_access_at.type))


class EntryRepository:
    """The ``entries`` table: the cache service's queries of its entries (the namespaces' and the feed's
    are :class:`~.namespaces.NamespaceRepository` and :class:`~.feed.FeedRepository`)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def ping(self) -> None:
        """Raise :class:`~cache_server.errors.IndexUnavailable` unless the database answers."""
        self._db.ping()

    # -- entries ----------------------------------------------------------------------------------------
    def get_entry(self, namespace: str, key: str) -> EntryInfo | None:
        """One entry by its key: the lookup of every GET and HEAD, so a Core row (an ORM object costs
        twice the time of the whole query)."""
        with self._db.reading() as connection:
            row = connection.execute(_ONE_ENTRY, {"namespace": namespace, "key": key}).first()
            return EntryInfo(*row) if row is not None else None

    def get_entries(self, namespace: str, keys: Sequence[str]) -> dict[str, EntryRef]:
        """The stored entries among ``keys``, by key (lean rows: a bundle's lookup of thousands)."""
        found: dict[str, EntryRef] = {}
        with self._db.reading() as connection:
            for part in chunked(list(dict.fromkeys(keys))):
                query = _REFS.where(Entry.namespace == namespace, Entry.key.in_(part))
                found.update((row.key, EntryRef(*row)) for row in connection.execute(query))
        return found

    def forget_packs(self, pack_ids: Sequence[str]) -> int:
        """Let no row point into these packs any more (found gone or damaged); returns how many did."""
        if not pack_ids:
            return 0
        with self._db.transaction() as session:
            result = session.execute(
                update(_ENTRIES)
                .where(_ENTRIES.c.pack.in_(list(pack_ids)))
                .values(pack=None, pack_offset=None)
            )
            return int(getattr(result, "rowcount", 0) or 0)

    def missing_keys(self, namespace: str, keys: Sequence[str]) -> list[str]:
        """The keys, in the order given and without duplicates, that have no entry."""
        unique = list(dict.fromkeys(keys))
        present: set[str] = set()
        with self._db.reading() as connection:
            for part in chunked(unique):
                present.update(
                    connection.scalars(
                        select(Entry.key).where(Entry.namespace == namespace, Entry.key.in_(part))
                    )
                )
        return [key for key in unique if key not in present]

    def record_entry(self, record: EntryRecord, *, replace: bool) -> bool:
        """Add the index row of a stored blob (and its namespace, if new). True if a row was written.

        ``replace`` is for the one writer that just created the blob: a stale row left behind for a
        blob that vanished is overwritten, and the namespace counts one upload. Otherwise (a writer
        that found the blob already there) an existing row wins and nothing is counted.
        """
        values = record.row()

        def write(session: Session) -> bool:
            add_namespaces(self._db, session, {record.namespace: record.created_at}, record.stored_by)
            stmt = self._db.insert(Entry).values(**values)
            if replace:
                changing = {k: v for k, v in values.items() if k not in ("namespace", "key")}
                stmt = stmt.on_conflict_do_update(index_elements=["namespace", "key"], set_=changing)
            else:
                stmt = stmt.on_conflict_do_nothing(index_elements=["namespace", "key"])
            written = session.execute(stmt.returning(Entry.key)).first() is not None
            if written and replace:
                session.execute(insert(EntryFeed).values(namespace=record.namespace, key=record.key))
                add_counts(
                    self._db,
                    session,
                    record.namespace,
                    record.created_at.date(),
                    last_used=record.created_at,
                    uploads=1,
                    bytes_uploaded=record.size,
                )
            return written

        return self._under_namespaces(write)

    def record_new_entries(self, records: Sequence[EntryRecord]) -> None:
        """The rows of blobs a batch just created, in one transaction per chunk, counted as uploads (a
        stale row left behind for a blob that vanished is overwritten, as :meth:`record_entry` does)."""
        for part in chunked(records):
            if part:
                self._under_namespaces(partial(self._write_new, part))

    def _write_new(self, part: Sequence[EntryRecord], session: Session) -> None:
        """One chunk of :meth:`record_new_entries`, in ``session``."""
        namespace = part[0].namespace
        assert all(record.namespace == namespace for record in part), "one namespace per call"
        add_namespaces(self._db, session, {namespace: min(r.created_at for r in part)}, part[0].stored_by)
        # One statement, executed for many rows: compiled once and cached (a multi-row VALUES of 500 rows
        # is compiled anew every time, a third of a bulk upload's index work). On the tables, not the ORM
        # classes: the ORM's bulk path cost as much again as the rows.
        stmt = self._db.insert(_ENTRIES)
        changing = {
            column: stmt.excluded[column] for column in part[0].row() if column not in ("namespace", "key")
        }
        upsert = stmt.on_conflict_do_update(index_elements=["namespace", "key"], set_=changing)
        session.execute(upsert, [record.row() for record in part])
        session.execute(insert(_FEED), [{"namespace": r.namespace, "key": r.key} for r in part])
        add_counts(
            self._db,
            session,
            namespace,
            part[-1].created_at.date(),
            last_used=part[-1].created_at,
            uploads=len(part),
            bytes_uploaded=sum(record.size for record in part),
        )

    def add_missing_entries(self, records: Sequence[EntryRecord]) -> int:
        """Insert the rows among ``records`` that the index lacks, with their namespaces; existing rows win.

        Returns how many rows were added. Hits and uploads are not counted: these are old entries found again.
        """
        return sum(self._under_namespaces(partial(self._write_missing, part)) for part in chunked(records))

    def _write_missing(self, part: Sequence[EntryRecord], session: Session) -> int:
        """One chunk of :meth:`add_missing_entries`, in ``session``: how many rows it added."""
        first_seen: dict[str, dt.datetime] = {}
        for record in part:
            seen = first_seen.get(record.namespace)
            first_seen[record.namespace] = min(seen, record.created_at) if seen else record.created_at
        add_namespaces(self._db, session, first_seen)
        stmt = (
            self._db.insert(Entry)
            .values([record.row() for record in part])
            .on_conflict_do_nothing(index_elements=["namespace", "key"])
            .returning(Entry.key)
        )
        return len(session.execute(stmt).all())

    def _under_namespaces(self, write: Callable[[Session], T]) -> T:
        """``write`` (which adds the rows of its namespaces with :func:`add_namespaces`, then entries under
        them) in one transaction; run again if a namespace's row went in between.

        A namespace's delete (:meth:`AdminRepository.drop_namespace_row
        <cache_server.index.admin.AdminRepository.drop_namespace_row>`) may drop a row this transaction found
        there, before its entries' foreign key check (PostgreSQL; SQLite runs one writer at a time): that
        check fails, and the transaction run again makes the row anew, so the entries are stored as the
        first of a new namespace would be. A delete that wins :data:`NAMESPACE_RACES` times in a row is
        :class:`IndexUnavailable` (503: retry), never a 500.
        """
        for _ in range(NAMESPACE_RACES):
            try:
                with self._db.transaction() as session:
                    return write(session)
            except IntegrityError as exc:
                if not foreign_key_violated(exc):
                    raise
                log.info("a namespace's row was deleted while entries were written under it; writing again")
        raise IndexUnavailable(
            "The namespace was being deleted while this upload stored its entries; nothing of them was "
            "recorded: please retry."
        )

    def delete_entry(
        self,
        namespace: str,
        key: str,
        *,
        policy: RemovalPolicy,
        when: dt.datetime,
        sha256: str | None = None,
    ) -> EntryInfo | None:
        """Remove an entry's row (only if it still has digest ``sha256``, when given), with a tombstone
        saying ``when`` and by which ``policy``; returns what was removed."""
        with self._db.transaction() as session:
            row = session.get(Entry, (namespace, key))
            if row is None or (sha256 is not None and row.sha256 != sha256):
                return None
            info = entry_info(row)
            session.delete(row)
            session.flush()
            removed = Removed(namespace, key, row.size, row.compile_time_ms)
            bury(self._db, session, [removed], policy, when)
            return info

    def manifest(self, namespace: str, *, max_bytes: int | None, max_entries: int | None) -> list[EntryRef]:
        """The most useful entries first (most hits, then most recently used), within the bounds.

        An entry that does not fit in what is left of ``max_bytes`` is skipped and smaller ones after it
        may still be taken.
        """
        chosen: list[EntryRef] = []
        budget = max_bytes
        query = _REFS.where(Entry.namespace == namespace).order_by(  # ix_entries_manifest_order
            Entry.hits.desc(), Entry.last_access_at.desc(), Entry.key
        )
        if budget is None and max_entries is not None:
            query = query.limit(max_entries)  # nothing is skipped: the first rows are the answer
        # Core rows on a Core connection (an ORM session costs half again), streamed: with a byte budget
        # the walk may go far. yield_per is a server-side cursor on PostgreSQL: close it even when the loop
        # stops early.
        with (
            self._db.reading() as connection,
            connection.execute(query.execution_options(yield_per=1000)) as rows,
        ):
            for row in rows:
                if max_entries is not None and len(chosen) >= max_entries:
                    break
                if budget is not None:
                    if row.size > budget:
                        continue
                    budget -= row.size
                chosen.append(EntryRef(*row))
        return chosen

    # -- access accounting ------------------------------------------------------------------------------
    @staticmethod
    def _compile_times(session: Session, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The reported compile time of each of these entries that has one (entries never change it)."""
        by_namespace: dict[str, list[str]] = {}
        for namespace, key in keys:
            by_namespace.setdefault(namespace, []).append(key)
        found: dict[tuple[str, str], int] = {}
        for namespace, names in by_namespace.items():
            for part in chunked(names):
                rows = session.execute(
                    select(Entry.key, Entry.compile_time_ms).where(
                        Entry.namespace == namespace,
                        Entry.key.in_(part),
                        Entry.compile_time_ms.is_not(None),
                    )
                )
                found.update({(namespace, key): int(ms or 0) for key, ms in rows})
        return found

    def apply_access(
        self, hits: Mapping[tuple[str, str], AccessDelta], misses: Mapping[str, int], *, day: dt.date
    ) -> None:
        """Write a batch of hits (per entry) and misses (per namespace) in one transaction, on ``day``.

        Each hit is credited with its entry's compile time (compile time saved).
        """
        if not hits and not misses:
            return
        per_namespace: dict[str, Counters] = {}
        last_used: dict[str, dt.datetime] = {}
        with self._db.transaction() as session:
            compile_ms = self._compile_times(session, list(hits))
            # Two executemany UPDATEs (hits alone, hits and access time), not one statement per entry.
            touched: list[dict[str, Any]] = []
            counted: list[dict[str, Any]] = []
            # In key order, as packing later updates rows: two transactions that lock rows in one order
            # do not deadlock (PostgreSQL would abort one; these counts would only wait for the next flush).
            for (namespace, key), delta in sorted(hits.items()):
                params = {"b_namespace": namespace, "b_key": key, "b_hits": delta.hits}
                if delta.last_access is not None:
                    touched.append({**params, "b_last": delta.last_access})
                    if namespace not in last_used or delta.last_access > last_used[namespace]:
                        last_used[namespace] = delta.last_access
                else:
                    counted.append(params)
                saved = compile_ms.get((namespace, key), 0)
                total = per_namespace.setdefault(namespace, Counters())
                total.hits += delta.hits
                total.bytes_served += delta.bytes_served
                total.compile_ms_saved += saved * delta.hits
                total.live_deliveries += delta.live
                total.live_compile_ms_saved += saved * delta.live
            if touched:
                session.connection().execute(_ADD_HITS_AND_ACCESS, touched)
            if counted:
                session.connection().execute(_ADD_HITS, counted)
            for namespace, count in misses.items():
                per_namespace.setdefault(namespace, Counters()).misses += count
            for namespace, counts in per_namespace.items():
                deltas = {name: getattr(counts, name) for name in COUNTERS}
                add_counts(self._db, session, namespace, day, last_used=last_used.get(namespace), **deltas)
