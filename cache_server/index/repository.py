"""Every query the server makes. Nothing outside this module writes SQL or builds a query.

Each public method runs in its own short transaction. Database errors that mean "cannot reach the
database" become :class:`~cache_server.errors.IndexUnavailable`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Engine, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from cache_server.errors import IndexUnavailable
from cache_server.index.daily import bump_daily, today
from cache_server.index.models import Entry, Namespace, utcnow

__all__ = ["AccessDelta", "EntryRecord", "IndexRepository", "NamespaceSummary"]

P = ParamSpec("P")
T = TypeVar("T")
IN_CHUNK = 500  # bound on the parameters of one IN (...) query


@dataclass(frozen=True)
class NamespaceSummary:
    """A namespace with its entry count and stored bytes."""

    namespace: Namespace
    entries: int
    bytes: int


@dataclass
class AccessDelta:
    """Hits on one entry since the last flush."""

    hits: int = 0
    bytes_served: int = 0
    last_access: dt.datetime | None = None
    compile_ms_saved: int = 0  # filled in while the batch is written: hits times the entry's compile time


def _chunks(items: Sequence[str], size: int = IN_CHUNK) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass(frozen=True)
class EntryRecord:
    """An entry's row as rebuilt from its blob (see :mod:`cache_server.reindex`)."""

    namespace: str
    key: str
    size: int
    sha256: str
    created_at: dt.datetime
    compile_time_ms: int | None = None
    uploader: str | None = None


ROWS_PER_INSERT = 100  # rows of one multi-row INSERT (well under SQLite's bound on parameters)


class IndexRepository:
    """The index: namespaces and entries in SQL."""

    def __init__(self, engine: Engine, sessions: sessionmaker[Session]) -> None:
        self.engine = engine
        self._sessions = sessions

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        try:
            with self._sessions.begin() as session:
                yield session
        except PoolTimeout as exc:
            # Every pooled connection is busy (or stuck on a database that stopped answering).
            raise IndexUnavailable(
                "The index database is overloaded: no connection came free in time "
                "(XLA_CACHE_DB_POOL_TIMEOUT); please retry."
            ) from exc
        except (OperationalError, DBAPIError) as exc:
            if isinstance(exc, OperationalError) or exc.connection_invalidated:
                raise IndexUnavailable(
                    "The index database cannot be reached; the cache will answer again once it is back."
                ) from exc
            raise

    def _insert(self) -> Callable[..., Any]:
        return postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert

    # -- health -----------------------------------------------------------------------------------------
    def ping(self) -> None:
        """Raise :class:`IndexUnavailable` unless the database answers."""
        with self._tx() as session:
            session.execute(text("SELECT 1"))

    # -- namespaces -------------------------------------------------------------------------------------
    def upsert_namespace(
        self, name: str, fingerprint: Mapping[str, Any], labels: Mapping[str, str]
    ) -> tuple[NamespaceSummary, bool]:
        """Create the namespace or replace its fingerprint and labels. Returns it and whether it is new."""
        now = utcnow()
        with self._tx() as session:
            stmt = self._insert()(Namespace).values(
                name=name,
                fingerprint=dict(fingerprint),
                labels=dict(labels),
                created_at=now,
                last_used_at=now,
            )
            inserted = stmt.on_conflict_do_nothing(index_elements=["name"]).returning(Namespace.name)
            created = session.execute(inserted).first() is not None
            if not created:
                session.execute(
                    update(Namespace)
                    .where(Namespace.name == name)
                    .values(fingerprint=dict(fingerprint), labels=dict(labels), last_used_at=now)
                )
        summary = self.get_namespace(name)
        assert summary is not None
        return summary, created

    def ensure_namespace(self, name: str) -> None:
        """Create an empty namespace row if there is none (an upload to an unregistered namespace)."""
        now = utcnow()
        with self._tx() as session:
            stmt = self._insert()(Namespace).values(
                name=name, fingerprint={}, labels={}, created_at=now, last_used_at=now
            )
            session.execute(stmt.on_conflict_do_nothing(index_elements=["name"]))

    def get_namespace(self, name: str) -> NamespaceSummary | None:
        with self._tx() as session:
            namespace = session.get(Namespace, name)
            if namespace is None:
                return None
            count, total = session.execute(
                select(func.count(), func.coalesce(func.sum(Entry.size), 0)).where(Entry.namespace == name)
            ).one()
            return NamespaceSummary(namespace=namespace, entries=int(count), bytes=int(total))

    # -- entries ----------------------------------------------------------------------------------------
    def get_entry(self, namespace: str, key: str) -> Entry | None:
        with self._tx() as session:
            return session.get(Entry, (namespace, key))

    def get_entries(self, namespace: str, keys: Sequence[str]) -> dict[str, Entry]:
        """The stored entries among ``keys``, by key."""
        found: dict[str, Entry] = {}
        with self._tx() as session:
            for part in _chunks(list(dict.fromkeys(keys))):
                rows = session.scalars(select(Entry).where(Entry.namespace == namespace, Entry.key.in_(part)))
                found.update((row.key, row) for row in rows)
        return found

    def missing_keys(self, namespace: str, keys: Sequence[str]) -> list[str]:
        """The keys, in the order given and without duplicates, that have no entry."""
        unique = list(dict.fromkeys(keys))
        present: set[str] = set()
        with self._tx() as session:
            for part in _chunks(unique):
                present.update(
                    session.scalars(
                        select(Entry.key).where(Entry.namespace == namespace, Entry.key.in_(part))
                    )
                )
        return [key for key in unique if key not in present]

    def record_entry(
        self,
        *,
        namespace: str,
        key: str,
        size: int,
        sha256: str,
        created_at: dt.datetime,
        compile_time_ms: int | None,
        uploader: str | None,
        replace: bool,
    ) -> bool:
        """Add the index row of a stored blob. True if a row was written.

        ``replace`` is for the one writer that just created the blob: a stale row left behind for a
        blob that vanished is overwritten, and the namespace counts one upload. Otherwise (a writer
        that found the blob already there) an existing row wins and nothing is counted.
        """
        values = {
            "namespace": namespace,
            "key": key,
            "size": size,
            "sha256": sha256,
            "created_at": created_at,
            "last_access_at": created_at,
            "hits": 0,
            "compile_time_ms": compile_time_ms,
            "uploader": uploader,
        }
        with self._tx() as session:
            session.execute(
                self._insert()(Namespace)
                .values(
                    name=namespace, fingerprint={}, labels={}, created_at=created_at, last_used_at=created_at
                )
                .on_conflict_do_nothing(index_elements=["name"])
            )
            stmt = self._insert()(Entry).values(**values)
            if replace:
                changing = {k: v for k, v in values.items() if k not in ("namespace", "key")}
                stmt = stmt.on_conflict_do_update(index_elements=["namespace", "key"], set_=changing)
            else:
                stmt = stmt.on_conflict_do_nothing(index_elements=["namespace", "key"])
            written = session.execute(stmt.returning(Entry.key)).first() is not None
            if written and replace:
                session.execute(
                    update(Namespace)
                    .where(Namespace.name == namespace)
                    .values(uploads=Namespace.uploads + 1, last_used_at=created_at)
                )
                bump_daily(session, self._insert(), namespace, today(), uploads=1, bytes_uploaded=size)
            return written

    def delete_entry(self, namespace: str, key: str) -> Entry | None:
        """Remove an entry's row; returns what was removed."""
        with self._tx() as session:
            entry = session.get(Entry, (namespace, key))
            if entry is not None:
                session.delete(entry)
            return entry

    def manifest(self, namespace: str, *, max_bytes: int | None, max_entries: int | None) -> list[Entry]:
        """The most useful entries first (most hits, then most recently used), within the bounds.

        An entry that does not fit in what is left of ``max_bytes`` is skipped and smaller ones after it
        may still be taken.
        """
        chosen: list[Entry] = []
        budget = max_bytes
        with self._tx() as session:
            rows = session.scalars(
                select(Entry)
                .where(Entry.namespace == namespace)
                .order_by(Entry.hits.desc(), Entry.last_access_at.desc(), Entry.key)
                .execution_options(yield_per=1000)
            )
            for row in rows:
                if max_entries is not None and len(chosen) >= max_entries:
                    break
                if budget is not None:
                    if row.size > budget:
                        continue
                    budget -= row.size
                chosen.append(row)
        return chosen

    # -- access accounting ------------------------------------------------------------------------------
    def apply_access(self, hits: Mapping[tuple[str, str], AccessDelta], misses: Mapping[str, int]) -> None:
        """Write a batch of hits (per entry) and misses (per namespace) in one transaction."""
        if not hits and not misses:
            return
        per_namespace: dict[str, AccessDelta] = {}
        with self._tx() as session:
            for (namespace, key), delta in hits.items():
                compile_ms = session.execute(
                    update(Entry)
                    .where(Entry.namespace == namespace, Entry.key == key)
                    .values(hits=Entry.hits + delta.hits, last_access_at=delta.last_access or utcnow())
                    .returning(Entry.compile_time_ms)
                ).scalar()
                total = per_namespace.setdefault(namespace, AccessDelta())
                total.hits += delta.hits
                total.bytes_served += delta.bytes_served
                total.compile_ms_saved += (compile_ms or 0) * delta.hits
                if delta.last_access and (total.last_access is None or delta.last_access > total.last_access):
                    total.last_access = delta.last_access
            for namespace in set(per_namespace) | set(misses):
                delta = per_namespace.get(namespace, AccessDelta())
                values: dict[str, Any] = {
                    "hits": Namespace.hits + delta.hits,
                    "misses": Namespace.misses + misses.get(namespace, 0),
                    "bytes_served": Namespace.bytes_served + delta.bytes_served,
                    "compile_ms_saved": Namespace.compile_ms_saved + delta.compile_ms_saved,
                }
                if delta.last_access is not None:
                    values["last_used_at"] = delta.last_access
                counted = session.execute(
                    update(Namespace)
                    .where(Namespace.name == namespace)
                    .values(**values)
                    .returning(Namespace.name)
                ).first()
                if counted is not None:  # no rollup rows for names nobody registered
                    bump_daily(
                        session,
                        self._insert(),
                        namespace,
                        today(),
                        hits=delta.hits,
                        misses=misses.get(namespace, 0),
                        bytes_served=delta.bytes_served,
                        compile_ms_saved=delta.compile_ms_saved,
                    )

    def add_missing_entries(self, records: Sequence[EntryRecord]) -> int:
        """Insert the rows among ``records`` that the index lacks, with their namespaces; existing rows win.

        Returns how many rows were added. Hits and uploads are not counted: these are old entries found again.
        """
        added = 0
        for start in range(0, len(records), ROWS_PER_INSERT):
            part = records[start : start + ROWS_PER_INSERT]
            first_seen: dict[str, dt.datetime] = {}
            for record in part:
                seen = first_seen.get(record.namespace)
                first_seen[record.namespace] = min(seen, record.created_at) if seen else record.created_at
            with self._tx() as session:
                session.execute(
                    self._insert()(Namespace)
                    .values(
                        [
                            {
                                "name": name,
                                "fingerprint": {},
                                "labels": {},
                                "created_at": at,
                                "last_used_at": at,
                            }
                            for name, at in first_seen.items()
                        ]
                    )
                    .on_conflict_do_nothing(index_elements=["name"])
                )
                rows = [
                    {
                        "namespace": r.namespace,
                        "key": r.key,
                        "size": r.size,
                        "sha256": r.sha256,
                        "created_at": r.created_at,
                        "last_access_at": r.created_at,
                        "hits": 0,
                        "compile_time_ms": r.compile_time_ms,
                        "uploader": r.uploader,
                    }
                    for r in part
                ]
                inserted = session.execute(
                    self._insert()(Entry)
                    .values(rows)
                    .on_conflict_do_nothing(index_elements=["namespace", "key"])
                    .returning(Entry.key)
                )
                added += len(inserted.all())
        return added

    def iter_entries(self, namespace: str | None = None) -> Iterable[Entry]:
        """Every entry (of one namespace, or all), for gc and reindex."""
        with self._tx() as session:
            stmt = select(Entry).order_by(Entry.namespace, Entry.key).execution_options(yield_per=1000)
            if namespace is not None:
                stmt = stmt.where(Entry.namespace == namespace)
            return list(session.scalars(stmt))
