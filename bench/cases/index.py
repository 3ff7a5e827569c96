"""The index at scale: 1,000,000 entries over 100 namespaces, on SQLite and on PostgreSQL.

Measured in process on the server's own services (no HTTP): the stats report, a manifest of 5,000 entries,
``missing`` for 1,000 keys, and evicting 100,000 entries (rows, then blobs). Setup, not measured: rows are
inserted in bulk; only the entries eviction removes get a blob file (the first written by the real local
store, the others copies of it), so setting up stays within minutes. PostgreSQL is the machine's
(127.0.0.1:5432, user postgres, trust auth; ``XLA_CACHE_TEST_POSTGRES_URL`` overrides), in a throwaway
database (:mod:`tests.support.databases`, as the tests make one).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from unittest import mock

from bench.core import CaseResult, Context, case

if TYPE_CHECKING:  # the server's modules are imported when the case runs, not by every benchmark run
    from cache_server.index.database import Database
    from cache_server.index.entries import EntryRecord, EntryRepository

NAMESPACES = 100
SIZE = 256
STATS_LIMIT, MANIFEST_LIMIT, MISSING_LIMIT, EVICT_LIMIT = 0.250, 0.150, 0.050, 30.0


def _put_blob(store: object, name: str, data: bytes, copy: bytes | None) -> bytes:
    """Store one blob; returns the bytes of its file. The first goes through the store (its real format),
    the others are that file's bytes written straight to their place: the store's own put, with its
    temporary file and link, would make setting up 300,000 blobs take many minutes."""
    from cache_server.storage.local import LocalBlobStore

    assert isinstance(store, LocalBlobStore)
    path: Path = store._path(name)
    if copy is None:
        store.put(name, [data], {"sha256": "0" * 64})
        return path.read_bytes()
    path.parent.mkdir(exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, copy)
    finally:
        os.close(fd)
    return copy


def _insert(database: Database, repository: EntryRepository, records: list[EntryRecord]) -> None:
    """Rows in bulk: the namespaces through the repository (the first row of each), the rest in plain
    multi-row inserts (the repository's insert-or-skip of 1,000,000 rows would take minutes)."""
    from sqlalchemy import insert, select

    from cache_server.index.models import Entry, Namespace

    with database.transaction() as session:
        known = set(session.scalars(select(Namespace.name)))
    first = {r.namespace: r for r in records if r.namespace not in known}
    repository.add_missing_entries(list(first.values()))
    rest = [r.row() for r in records if first.get(r.namespace) is not r]
    if rest:
        # Multi-row statements of 1,000 rows (SQLAlchemy's "insertmanyvalues", which RETURNING turns on), as
        # the server's own bulk writes are: the triggers that keep entry_totals run once per statement on
        # PostgreSQL (a plain executemany would be a statement, and an update of entry_totals, per row).
        with database.transaction() as session:
            session.execute(insert(Entry).returning(Entry.key), rest).all()


def _one_database(ctx: Context, result: CaseResult, kind: str, entries: int, evict: int) -> None:
    from cache_server.index.entries import EntryRecord, EntryRepository
    from cache_server.index.migrate import upgrade
    from cache_server.settings import Settings
    from cache_server.storage.base import blob_name
    from cache_server.wiring import build_services

    directory = ctx.tmpdir(f"index-{kind}")
    from tests.support.databases import fresh_database_url

    with fresh_database_url(kind, directory) as url:
        settings = Settings(data_dir=directory, database_url=url)
        upgrade(settings)
        services = build_services(settings)
        try:
            started = time.perf_counter()
            start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=2)
            with_blobs = evict * ctx.reps
            data = b"x" * SIZE
            records: list[EntryRecord] = []
            repository = EntryRepository(services.database)
            blob: bytes | None = None
            with mock.patch("os.fsync"):  # setup only
                for i in range(entries):
                    namespace, key = f"ns{i % NAMESPACES:03d}", f"{i:012d}"
                    if i < with_blobs:
                        blob = _put_blob(services.store, blob_name(namespace, key), data, blob)
                    records.append(
                        EntryRecord(
                            namespace, key, SIZE, "0" * 64, created_at=start + dt.timedelta(seconds=i / 10)
                        )
                    )
                    if len(records) >= 50_000:
                        _insert(services.database, repository, records)
                        records.clear()
                _insert(services.database, repository, records)
            if kind == "postgresql":
                from sqlalchemy import text

                with services.database.transaction() as session:
                    session.execute(text("ANALYZE"))
            result.notes.append(
                f"{kind}: {entries:,} rows, {with_blobs:,} blobs set up in "
                f"{time.perf_counter() - started:.0f} s"
            )
            admin, cache = services.admin, services.cache
            namespace = "ns042"
            keys = [f"{i:012d}" for i in range(42, entries, NAMESPACES)][:500]
            keys += [f"x{i:011d}" for i in range(1000 - len(keys))]  # half absent
            checks: list[tuple[str, Callable[[], object], float, dict[str, float]]] = [
                ("stats", lambda: admin.stats(), STATS_LIMIT, {"reports": 1}),
                (
                    "manifest of 5,000",
                    lambda: cache.manifest(namespace, max_entries=5000),
                    MANIFEST_LIMIT,
                    {"entries": 5000},
                ),
                (
                    "missing for 1,000 keys",
                    lambda: cache.missing(namespace, keys),
                    MISSING_LIMIT,
                    {"keys": 1000},
                ),
            ]
            for label, work, limit, amount in checks:
                work()  # warm-up: caches, plans
                series = result.add(ctx.repeat(f"{kind}: {label}", work, work=amount))
                result.target(
                    f"{kind}: {label} < {limit * 1000:.0f} ms",
                    series.median * 1000,
                    limit * 1000,
                    at_most=True,
                    fmt="{:.0f} ms",
                    why=f"{entries:,} entries in {NAMESPACES} namespaces",
                )
            evicted: list[int] = []

            def evict_once() -> None:
                total = sum(size for _, size in admin.stored_by_namespace().values())
                outcome = services.evictor.evict(max_total_bytes=total - evict * SIZE)
                evicted.append(outcome.evicted)

            series = result.add(ctx.repeat(f"{kind}: evict {evict:,}", evict_once, work={"entries": evict}))
            if any(n != evict for n in evicted):
                result.notes.append(f"{kind}: evictions removed {evicted}, expected {evict} each")
            result.target(
                f"{kind}: evicting {evict:,} < {EVICT_LIMIT:.0f} s",
                series.median,
                EVICT_LIMIT,
                at_most=True,
                fmt="{:.1f} s",
                why="rows in batches of 5,000, then their blobs",
                not_measured="" if evict == 100_000 else f"smaller run: {evict:,} evicted, not 100,000",
            )
        finally:
            services.stop()


@case(
    "index-scale", "1,000,000 entries over 100 namespaces: stats, manifest, missing, eviction", full_only=True
)
def index_scale(ctx: Context, result: CaseResult) -> None:
    entries = int(ctx.options.get("index_entries") or 1_000_000)
    evict = min(100_000, entries // (ctx.reps + 1))
    for kind in ("sqlite", "postgresql"):
        try:
            _one_database(ctx, result, kind, entries, evict)
        except Exception as exc:  # PostgreSQL may be down: SQLite's figures still count
            result.notes.append(f"{kind}: failed: {type(exc).__name__}: {exc}")
            result.target(
                f"{kind}: index targets", None, 0, at_most=True, not_measured=f"{kind} failed: {exc}"
            )
