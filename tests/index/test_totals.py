"""entry_totals (kept by triggers, migration 0006) stays equal to a fresh count of the entries, on SQLite and
PostgreSQL: after every kind of write, with writers running at once, and after the migration's backfill."""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy import insert, inspect, select

from cache_server.domain import utcnow
from cache_server.index import AdminRepository, Database, EntryRepository
from cache_server.index.entries import AccessDelta
from cache_server.index.migrate import downgrade, upgrade
from cache_server.index.models import Entry, EntryTotals, Namespace
from cache_server.index.namespaces import NamespaceRepository
from cache_server.settings import Settings
from tests.support.entry_records import record


def assert_consistent(admin: AdminRepository) -> None:
    assert admin.kept_totals() == admin.counted_totals()


def test_every_write_keeps_the_totals(database: Database) -> None:
    entries, admin = EntryRepository(database), AdminRepository(database)
    now = utcnow()
    assert admin.kept_totals() == {} and admin.stored_by_namespace() == {}

    assert entries.record_entry(record("a", "k1", 10), replace=True)  # single upload
    assert not entries.record_entry(record("a", "k1", 99, "t1"), replace=False)  # found there: nothing
    entries.record_new_entries([record("a", f"b{i}", i + 1, "t1") for i in range(700)])  # bulk, two parts
    entries.record_new_entries([record("b", f"b{i}", 5, "t2") for i in range(30)])
    assert_consistent(admin)
    assert admin.stored_by_namespace() == {"a": (701, 10 + 700 * 701 // 2), "b": (30, 150)}
    assert admin.stored_by_token() == {None: (1, 10), "t1": (700, 700 * 701 // 2), "t2": (30, 150)}

    # a stale row overwritten by the writer that created the blob: new size and token, same count
    assert entries.record_entry(record("a", "k1", 40, "t2"), replace=True)
    entries.record_new_entries([record("a", "b0", 1000, "t2")])
    assert_consistent(admin)
    # reindex: only the rows the index lacks
    assert (
        entries.add_missing_entries([record("a", "k1", 1), record("c", "r1", 7), record("c", "r2", 8)]) == 2
    )
    assert_consistent(admin)

    entries.delete_entry("a", "k1", policy="admin", when=utcnow())  # DELETE of one entry
    admin.delete_entries(
        [("a", f"b{i}") for i in range(100)], policy="lru", when=now, count_evictions=True
    )  # eviction
    admin.delete_entries(
        [(ref.namespace, ref.key) for ref in admin.iter_stored_by(["t2"])], policy="purge", when=now
    )  # purge
    admin.delete_entries([("c", "r1"), ("c", "nothing")], policy="lost", when=now)  # gc's dropped rows
    assert_consistent(admin)
    assert "t2" not in admin.stored_by_token()

    for key, _ in admin.keys_page("c", after=None, limit=100):  # delete a namespace
        admin.delete_entries([("c", key)], policy="lost", when=utcnow())
    assert admin.drop_namespace_row("c")
    assert_consistent(admin)
    assert "c" not in admin.stored_by_namespace()
    with database.transaction() as session:
        assert session.scalars(select(EntryTotals).where(EntryTotals.namespace == "c")).all() == []

    # the namespace's own summary reads the same totals
    info = NamespaceRepository(database).get_namespace("a")
    assert info is not None and (info.entries, info.bytes) == admin.stored_by_namespace()["a"]
    # a namespace row deleted with its entries (the foreign key's cascade) takes them off too
    assert admin.drop_namespace_row("b")
    assert_consistent(admin)


def test_hits_do_not_touch_the_totals(database: Database) -> None:
    entries, admin = EntryRepository(database), AdminRepository(database)
    entries.record_entry(record("a", "k", 10), replace=True)
    entries.apply_access(
        {("a", "k"): AccessDelta(hits=3, bytes_served=30, last_access=utcnow())}, {}, day=utcnow().date()
    )
    assert admin.kept_totals() == {("a", None): (1, 10)}


def test_concurrent_uploads_and_evictions_lose_no_count(database: Database) -> None:
    """Uploads (single and bulk) into shared namespaces while others evict from them, all at once."""
    entries, admin = EntryRepository(database), AdminRepository(database)
    entries.record_new_entries([record("shared", f"seed{i}", 3) for i in range(400)])
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run(work: Callable[[], None]) -> None:
        try:
            start.wait()
            work()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    def single(token: str) -> None:
        for i in range(60):
            entries.record_entry(record("shared", f"{token}-{i}", i + 1, token), replace=True)
            entries.record_entry(record(f"ns{i % 3}", f"{token}-{i}", 2, token), replace=True)

    def bulk() -> None:
        for part in range(6):
            entries.record_new_entries([record("shared", f"bulk{part}-{i}", 7, "t3") for i in range(50)])

    def evict() -> None:
        for part in range(20):
            victims = [("shared", f"seed{i}") for i in range(part * 20, part * 20 + 20)]
            victims += [(f"ns{j}", f"t1-{part * 3 + j}") for j in range(3)]
            admin.delete_entries(victims, policy="lru", when=utcnow(), count_evictions=True)

    threads = [
        threading.Thread(target=run, args=(work,))
        for work in (lambda: single("t1"), lambda: single("t2"), bulk, evict)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert_consistent(admin)
    assert admin.stored_by_namespace()["shared"] == (420, 2 * sum(range(1, 61)) + 300 * 7)  # the seeds went


def test_migration_backfills_and_downgrades(db_settings: Settings) -> None:
    upgrade(db_settings, "0005")
    db = Database.from_settings(db_settings)
    try:
        now = utcnow()
        with db.transaction() as session:
            session.execute(
                insert(Namespace),
                [
                    {"name": n, "fingerprint": {}, "labels": {}, "created_at": now, "last_used_at": now}
                    for n in "ab"
                ],
            )
            rows = [
                record(ns, f"k{i}", i, token).row()
                for ns, token in (("a", None), ("a", "t1"), ("b", "t1"))
                for i in range(1, 51)
            ]
            for i, row in enumerate(rows):
                row["key"] = f"{row['key']}-{i}"
            session.execute(insert(Entry), rows)
        upgrade(db_settings)
        admin = AdminRepository(db)
        assert admin.kept_totals() == {
            ("a", None): (50, 1275),
            ("a", "t1"): (50, 1275),
            ("b", "t1"): (50, 1275),
        }
        EntryRepository(db).record_entry(record("b", "new", 5), replace=True)  # the triggers are in place
        assert_consistent(admin)
        downgrade(db_settings, "0005")
        with db.engine.connect() as conn:
            assert "entry_totals" not in inspect(conn).get_table_names()
        with db.transaction() as session:  # no trigger left behind to write into a missing table
            session.execute(insert(Entry), [record("b", "after", 1).row()])
            session.execute(Entry.__table__.delete().where(Entry.key == "after"))
        upgrade(db_settings)
        assert_consistent(admin)
    finally:
        db.dispose()
