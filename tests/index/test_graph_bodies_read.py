"""A graph's latest bodies, as the bucketing report reads them (``GraphVariantsRepository.read_bodies``), off
the partial index of the rows with a body (``ix_entry_graphs_bodies``, migration 0022), on SQLite and
PostgreSQL: the latest parsed first, rows without a body skipped, the count of those with one, the
characters' bound, and the index really used for both reads."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import update

from cache_server.index import Database, EntryRepository
from cache_server.index.graph_records import GraphRecord, GraphRepository
from cache_server.index.graph_variants import GraphVariantsRepository
from cache_server.index.models import EntryGraph
from tests.support.entry_records import record
from tests.support.query_plans import sqlite_plans

START = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def body(key: str, module: str = "m") -> GraphRecord:
    return GraphRecord(
        "ns", key, module, "sig", "(f32[4]) -> (f32[4])", structure=f"s-{key}", ops=f'[["add", "{key}"]]'
    )


def parsed(database: Database, order: list[str]) -> None:
    """Set the rows' parse times: ``order[0]`` parsed first, a minute apart (upload order aside)."""
    with database.transaction() as session:
        for minute, key in enumerate(order):
            at = START + dt.timedelta(minutes=minute)
            session.execute(update(EntryGraph).where(EntryGraph.key == key).values(parsed_at=at))


def test_the_latest_parsed_bodies_come_first_and_rows_without_one_are_skipped(database: Database) -> None:
    keys = [f"k{i:02d}" for i in range(30)]
    EntryRepository(database).record_new_entries([record("ns", key, 10) for key in [*keys, "bare", "x"]])
    graphs = GraphRepository(database)
    assert graphs.record_graphs([body(key) for key in keys]) == 30
    graphs.record_graph(
        GraphRecord("ns", "bare", "m", "sig", "(f32[4]) -> (f32[4])", structure="")
    )  # too large
    graphs.record_graph(body("x", module="other"))
    # parsed in an order that is neither the keys' nor the uploads': k07 last, then k21, then the rest
    order = [key for key in keys if key not in ("k07", "k21")] + ["k21", "k07"]
    parsed(database, ["bare", *order, "x"])

    variants = GraphVariantsRepository(database)
    found = variants.read_bodies("ns", "m", limit=3, max_text=10_000)
    assert [b.key for b in found.bodies] == ["k07", "k21", order[-3]]
    assert found.stored == 30  # "bare" has no body; "x" is another module
    assert [b.structure for b in found.bodies] == ["s-k07", "s-k21", f"s-{order[-3]}"]
    assert found.bodies[0].ops == '[["add", "k07"]]'

    one_text = len(body("k07").ops or "")
    assert [b.key for b in variants.read_bodies("ns", "m", limit=3, max_text=2 * one_text).bodies] == [
        "k07",
        "k21",
    ]
    counted_only = variants.read_bodies("ns", "m", limit=3, max_text=0)
    assert counted_only.bodies == [] and counted_only.stored == 30
    assert variants.read_bodies("ns", "nothing", limit=3, max_text=10_000).stored == 0


def test_the_reads_are_ranges_of_the_bodies_index(database: Database) -> None:
    """SQLite uses a partial index only where the query's conditions name the index's own: the read of the
    latest keys and the count must say ``ops IS NOT NULL`` as the index does (PostgreSQL's plan of a tiny
    table is a sequential scan whatever the indexes; the bench at 1,000,000 entries shows its use there)."""
    if database.engine.dialect.name != "sqlite":
        return
    EntryRepository(database).record_new_entries([record("ns", f"k{i}", 10) for i in range(5)])
    GraphRepository(database).record_graphs([body(f"k{i}") for i in range(5)])
    plans = sqlite_plans(
        database,
        lambda: GraphVariantsRepository(database).read_bodies("ns", "m", limit=2, max_text=10_000),
        lambda statement: "parsed_at DESC" in statement or "count(*)" in statement,
    )
    assert len(plans) == 2
    for details in plans:
        assert "ix_entry_graphs_bodies" in details, details
