"""graph_counts (kept by triggers on entry_graphs, migration 0013, and on entries for its compile ms, 0021)
stays equal to a fresh count of each graph's distinct signatures and rows and a fresh sum of its entries'
compile times, on SQLite and PostgreSQL: through parsing, reindex, an entry's row overwritten, every way an
entry goes (eviction, delete, purge, gc, a namespace's deletion), writers at once, and the migrations'
backfills."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import delete, func, insert, inspect, select, update

from cache_server.domain import utcnow
from cache_server.index import AdminRepository, Database, EntryRepository
from cache_server.index.graph_records import GraphRecord, GraphRepository
from cache_server.index.graph_variants import GraphVariantsRepository
from cache_server.index.migrate import downgrade, upgrade
from cache_server.index.models import Entry, EntryGraph, GraphCount, Namespace
from cache_server.settings import Settings
from tests.support.entry_records import record
from tests.support.wait import wait_until

Counts = dict[tuple[str, str], tuple[int, int]]
Sums = dict[tuple[str, str], tuple[int, int, int]]


def counted(db: Database) -> Sums:
    """(variants, entries, compile ms) per namespace and module, counted and summed afresh over
    ``entry_graphs`` and their entries."""
    stmt = (
        select(
            EntryGraph.namespace,
            EntryGraph.module,
            func.count(func.distinct(EntryGraph.signature)),
            func.count(),
            func.coalesce(func.sum(Entry.compile_time_ms), 0),
        )
        .join(Entry, (Entry.namespace == EntryGraph.namespace) & (Entry.key == EntryGraph.key))
        .where(EntryGraph.module.is_not(None))
        .group_by(EntryGraph.namespace, EntryGraph.module)
    )
    with db.transaction() as session:
        return {(ns, str(m)): (int(v), int(n), int(ms)) for ns, m, v, n, ms in session.execute(stmt)}


def kept_sums(db: Database) -> Sums:
    """The ``graph_counts`` rows that are not zero."""
    with db.transaction() as session:
        rows = session.scalars(select(GraphCount)).all()
    assert all(row.variants >= 0 and row.entries >= row.variants and row.compile_ms >= 0 for row in rows)
    return {
        (r.namespace, r.module): (r.variants, r.entries, r.compile_ms)
        for r in rows
        if r.variants or r.entries or r.compile_ms
    }


def kept(db: Database) -> Counts:
    """The ``graph_counts`` rows that are not zero: (variants, entries)."""
    return {graph: (v, n) for graph, (v, n, _) in kept_sums(db).items()}


def assert_consistent(db: Database) -> Counts:
    found = kept_sums(db)
    assert found == counted(db)
    return {graph: (v, n) for graph, (v, n, _) in found.items()}


def graph(namespace: str, key: str, module: str | None, shape: int | None) -> GraphRecord:
    """What parsing found for one entry: ``module`` at the shape ``f32[shape]`` (its signature)."""
    if module is None or shape is None:
        return GraphRecord(namespace, key, module)
    return GraphRecord(namespace, key, module, f"sig{shape}", f"(f32[{shape}]) -> (f32[])")


def test_every_write_keeps_the_counts(database: Database) -> None:
    entries, admin = EntryRepository(database), AdminRepository(database)
    graphs = GraphRepository(database)
    now = utcnow()
    # compile times on most entries (none on every seventh), as uploads report them
    entries.record_new_entries(
        [record("a", f"k{i}", 10, "t1" if i < 40 else None, 100 + i if i % 7 else None) for i in range(60)]
    )
    entries.record_new_entries([record("b", f"k{i}", 10, compile_ms=1000 * i) for i in range(10)])
    # parsing: in a batch (statement per batch), one at a time, a repeated signature, an unparseable entry
    assert graphs.record_graphs([graph("a", f"k{i}", "m1", i % 25) for i in range(50)]) == 50
    assert graphs.record_graph(graph("a", "k50", "m2", 1))
    assert graphs.record_graph(graph("a", "k51", "m2", 1))  # same shapes, another key: not a new variant
    assert graphs.record_graph(graph("a", "k52", None, None))  # a TPU executable: no module, not counted
    assert graphs.record_graph(graph("a", "k53", "m2", None))  # a module without a signature: an entry only
    assert graphs.record_graphs([graph("b", f"k{i}", "m1", i) for i in range(10)]) == 10
    graphs.record_graphs([graph("a", "k0", "m1", 99)])  # parsed already: nothing changes
    assert not graphs.record_graph(graph("a", "gone", "m1", 7))  # evicted while parsed: nothing recorded
    assert assert_consistent(database) == {("a", "m1"): (25, 50), ("a", "m2"): (1, 3), ("b", "m1"): (10, 10)}

    # rows from before migration 0014 (a module, no body) parsed again: the body is filled in, and only it
    with database.transaction() as session:
        session.execute(update(EntryGraph).where(EntryGraph.namespace == "b").values(structure=None))
    bodies = [
        GraphRecord("b", f"k{i}", "m9", f"sig{i + 100}", "()", structure=f"s{i}", ops="[]") for i in range(10)
    ]
    assert graphs.record_graphs(bodies) == 10
    assert assert_consistent(database)[("b", "m1")] == (10, 10)
    with database.transaction() as session:
        found = session.execute(
            select(EntryGraph.module, EntryGraph.signature, EntryGraph.structure, EntryGraph.ops)
            .where(EntryGraph.namespace == "b")
            .order_by(EntryGraph.key)
        ).all()
    assert {(m, s, o) for m, s, _, o in found} == {("m1", s, "[]") for _, s, _, _ in found}
    assert sorted(structure for _, _, structure, _ in found) == sorted(f"s{i}" for i in range(10))
    graphs.record_graphs([GraphRecord("b", "k0", "m9", "x", "()", structure="other", ops="{}")])  # has one
    with database.transaction() as session:
        assert (
            session.scalar(
                select(EntryGraph.structure).where(EntryGraph.key == "k0", EntryGraph.namespace == "b")
            )
            == "s0"
        )

    # an upload that overwrites an entry's row (a stale row left for a blob that vanished): its compile time
    entries.record_new_entries([record("a", "k1", 10, "t1", 5000), record("a", "k7", 10, "t1", None)])
    entries.record_entry(record("a", "k2", 10, "t1", 7), replace=True)
    assert kept_sums(database)[("a", "m1")][2] == sum(
        {1: 5000, 7: 0, 2: 7}.get(i, 100 + i if i % 7 else 0) for i in range(50)
    )
    assert_consistent(database)

    # reindex: rows found again, then parsed again
    assert (
        entries.add_missing_entries([record("a", "k0", 1), record("c", "r1", 7), record("c", "r2", 8)]) == 2
    )
    graphs.record_graphs([graph("c", "r1", "m1", 1), graph("c", "r2", "m1", 2)])
    assert_consistent(database)

    # eviction of half of a variant's entries keeps the variant; of the rest, takes it off
    admin.delete_entries([("a", f"k{i}") for i in range(25)], policy="lru", when=now, count_evictions=True)
    assert kept(database)[("a", "m1")] == (25, 25)
    entries.delete_entry("a", "k25", policy="admin", when=now)  # DELETE of one entry: its last row
    assert kept(database)[("a", "m1")] == (24, 24)
    admin.delete_entries(
        [(ref.namespace, ref.key) for ref in admin.iter_stored_by(["t1"])], policy="purge", when=now
    )  # purge
    admin.delete_entries([("a", "k50"), ("a", "nothing")], policy="lost", when=now)  # gc's dropped rows
    assert_consistent(database)
    assert kept(database)[("a", "m2")] == (1, 2)
    # a row changed in place (nothing does it today; the trigger keeps it exact all the same)
    with database.transaction() as session:
        session.execute(update(EntryGraph).where(EntryGraph.key == "k51").values(signature="sig2"))
        session.execute(
            update(EntryGraph).where(EntryGraph.key == "k53").values(module="m3", signature="sig2")
        )
    assert assert_consistent(database)[("a", "m2")] == (1, 1)

    for key, _ in admin.keys_page("c", after=None, limit=100):  # delete a namespace
        admin.delete_entries([("c", key)], policy="lost", when=utcnow())
    assert admin.drop_namespace_row("c")
    assert not admin.drop_namespace_row("b")  # it holds entries: a namespace's delete leaves its row
    with database.transaction() as session:  # deleted all the same, the foreign key's cascade takes its
        session.execute(delete(Namespace).where(Namespace.name == "b"))  # entries' graphs
        session.execute(delete(GraphCount).where(GraphCount.namespace == "b"))  # as drop_namespace_row does
    assert_consistent(database)
    with database.transaction() as session:
        assert (
            session.scalars(select(GraphCount.namespace).where(GraphCount.namespace.in_(["b", "c"]))).all()
            == []
        )

    # the report ranks from these rows: most variants, then most entries, then by name; zero rows skipped
    admin.delete_entries([("a", "k51")], policy="lru", when=now)
    repository = GraphVariantsRepository(database)
    ranked = repository.read_shapes("a", repository.ranked("a", top=10), [5, 5])
    assert [(g.module, g.variants, g.entries, len(g.shapes)) for g in ranked] == [
        ("m1", 10, 10, 5),
        ("m3", 1, 1, 0),
    ]


def test_concurrent_parsing_and_evictions_lose_no_count(database: Database) -> None:
    """Writers that record the same new signatures under other keys, and evict, all at once."""
    entries, admin = EntryRepository(database), AdminRepository(database)
    graphs = GraphRepository(database)
    entries.record_new_entries([record("shared", f"{w}-{i}", 3) for w in ("p", "q", "r") for i in range(120)])
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def run(work: Callable[[], None]) -> None:
        try:
            start.wait()
            work()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    def parse(writer: str) -> None:  # both writers see every shape as new at the same moments
        for part in range(12):
            graphs.record_graphs(
                [graph("shared", f"{writer}-{i}", "m", i) for i in range(part * 10, part * 10 + 10)]
            )

    def evict() -> None:
        graphs.record_graphs([graph("shared", f"r-{i}", "m", i) for i in range(120)])
        for part in range(12):
            victims = [("shared", f"r-{i}") for i in range(part * 10, part * 10 + 10)]
            admin.delete_entries(victims, policy="lru", when=utcnow(), count_evictions=True)

    threads = [
        threading.Thread(target=run, args=(w,)) for w in (lambda: parse("p"), lambda: parse("q"), evict)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert assert_consistent(database) == {("shared", "m"): (120, 240)}


def test_migration_backfills_and_downgrades(db_settings: Settings) -> None:
    upgrade(db_settings, "0012")
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
            session.execute(insert(Entry), [record(ns, f"k{i}", 1).row() for ns in "ab" for i in range(30)])
            session.execute(
                insert(EntryGraph),
                [
                    {
                        "namespace": ns,
                        "key": f"k{i}",
                        "module": "m" if i < 20 else None,
                        "signature": f"s{i % 7}",
                    }
                    for ns in "ab"
                    for i in range(30)
                ],
            )
        upgrade(db_settings)
        assert assert_consistent(db) == {("a", "m"): (7, 20), ("b", "m"): (7, 20)}
        AdminRepository(db).delete_entries([("a", "k0")], policy="lru", when=now)  # the triggers are in place
        assert assert_consistent(db)[("a", "m")] == (7, 19)
        downgrade(db_settings, "0012")
        with db.engine.connect() as conn:
            assert "graph_counts" not in inspect(conn).get_table_names()
        with db.transaction() as session:  # no trigger left behind to write into a missing table
            session.execute(EntryGraph.__table__.delete().where(EntryGraph.key == "k1"))
        upgrade(db_settings)  # the backfill counts afresh
        assert assert_consistent(db) == {("a", "m"): (7, 18), ("b", "m"): (7, 19)}
    finally:
        db.dispose()


def test_compile_ms_migration_backfills_and_downgrades(db_settings: Settings) -> None:
    """0021 sums the compile times of the graphs already parsed; its downgrade leaves 0013's counts kept."""
    upgrade(db_settings, "0020")
    db = Database.from_settings(db_settings)
    try:
        entries = EntryRepository(db)
        entries.record_new_entries([record("a", f"k{i}", 1, compile_ms=i or None) for i in range(30)])
        GraphRepository(db).record_graphs(
            [graph("a", f"k{i}", "m" if i < 20 else "n", i % 7) for i in range(30)]
        )
        upgrade(db_settings)
        assert kept_sums(db) == {("a", "m"): (7, 20, sum(range(20))), ("a", "n"): (7, 10, sum(range(20, 30)))}
        AdminRepository(db).delete_entries([("a", "k5")], policy="lru", when=utcnow())  # triggers in place
        assert kept_sums(db)[("a", "m")] == (7, 19, sum(range(20)) - 5)
        assert_consistent(db)
        downgrade(db_settings, "0020")
        with db.engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("graph_counts")}
        assert "compile_ms" not in columns
        AdminRepository(db).delete_entries([("a", "k6")], policy="lru", when=utcnow())  # 0013's triggers
        entries.record_new_entries([record("a", "k7", 1, compile_ms=700)])
        upgrade(db_settings)  # the backfill sums afresh
        assert assert_consistent(db) == {("a", "m"): (7, 18), ("a", "n"): (7, 10)}
        assert kept_sums(db)[("a", "m")][2] == sum(range(20)) - 5 - 6 - 7 + 700
    finally:
        db.dispose()


def _waiting_on_a_lock(database: Database, pid: int) -> bool:
    """Whether PostgreSQL backend ``pid`` is waiting for a lock held by another transaction."""
    with database.engine.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %(pid)s", {"pid": pid}
        ).scalar()
    return found == "Lock"


def _interleaved(database: Database, first: Any, then: Any) -> bool:
    """Statement ``first`` executed in a transaction left open, then ``then`` in a transaction of its own on
    another thread, until that one waits for a lock or ends; then the first commits and the second ends.
    Whether the second waited for the first."""
    pid: list[int] = []
    waited: list[bool] = []
    errors: list[BaseException] = []

    def second() -> None:
        try:
            with database.engine.begin() as conn:
                pid.append(int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()))
                conn.execute(then)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    with database.engine.connect() as conn:
        with conn.begin():
            conn.execute(first)
            thread = threading.Thread(target=second)
            thread.start()
            wait_until(lambda: pid or errors, timeout=30, message="the second transaction never began")

            def waits_or_ended() -> bool:
                if _waiting_on_a_lock(database, pid[0]):
                    waited.append(True)
                return bool(errors or waited or not thread.is_alive())

            wait_until(waits_or_ended, timeout=30, message="the second statement neither waited nor ended")
        thread.join(30)
    assert not errors, errors
    return bool(waited)


def test_a_compile_time_recorded_while_the_graph_is_parsed_is_counted(database: Database) -> None:
    """An upload overwrites an entry's row with a new compile time while the parser records that entry's
    graph, each in a transaction in flight, in either order (PostgreSQL's read committed: each statement
    sees what was committed when it began; migration 0024 makes the parser's wait). SQLite writes one
    transaction at a time, so there is nothing to interleave there."""
    if database.engine.dialect.name != "postgresql":
        return
    entries = EntryRepository(database)
    entries.record_new_entries([record("a", f"k{i}", 10, compile_ms=100) for i in range(3)])
    GraphRepository(database).record_graphs([graph("a", "k0", "m", 0)])
    assert kept_sums(database) == {("a", "m"): (1, 1, 100)}

    def new_time(key: str, ms: int) -> Any:
        return update(Entry).where(Entry.namespace == "a", Entry.key == key).values(compile_time_ms=ms)

    def parsed(key: str) -> Any:
        return insert(EntryGraph).values(namespace="a", key=key, module="m", signature=key, shapes="()")

    # the upload's update in flight, then the parser's insert (which must wait for it), and the reverse
    assert _interleaved(database, new_time("k1", 250), parsed("k1"))
    assert_consistent(database)
    assert kept_sums(database)[("a", "m")] == (2, 2, 350)
    assert _interleaved(database, parsed("k2"), new_time("k2", 400))
    assert_consistent(database)
    assert kept_sums(database)[("a", "m")] == (3, 3, 750)


def test_the_access_flush_and_the_parser_do_not_wait_for_each_other(database: Database) -> None:
    """The lock that makes a compile time's change and a graph's insert take turns is taken by changes of
    compile times only: the access counters' flush (hits, last access) and the parser's insert of the same
    entry's graph, both in flight, go on without waiting, in either order (PostgreSQL; SQLite writes one
    transaction at a time)."""
    if database.engine.dialect.name != "postgresql":
        return
    EntryRepository(database).record_new_entries([record("a", f"k{i}", 10, compile_ms=100) for i in range(2)])

    def hit(key: str) -> Any:
        return update(Entry).where(Entry.namespace == "a", Entry.key == key).values(hits=Entry.hits + 1)

    def parsed(key: str) -> Any:
        return insert(EntryGraph).values(namespace="a", key=key, module="m", signature=key, shapes="()")

    assert not _interleaved(database, parsed("k0"), hit("k0"))
    assert not _interleaved(database, hit("k1"), parsed("k1"))
    assert_consistent(database)
    assert kept_sums(database)[("a", "m")] == (2, 2, 200)
