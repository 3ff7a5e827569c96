"""How many of a namespace's entries a prefill stored, and how many unverified, as the graphs report counts
them (``GraphVariantsRepository.prefilled``) off the partial index of prefilled entries
(``ix_entries_prefilled``, migration 0023), on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

from cache_protocol.prefill import is_prefilled, is_unverified, prefill_uploader
from cache_server.index import Database, EntryRepository
from cache_server.index.graph_variants import GraphVariantsRepository
from tests.support.entry_records import record
from tests.support.query_plans import sqlite_plans

UPLOADERS = [
    prefill_uploader("cpu-1", 11, None, unverified=False),
    prefill_uploader("cpu-1", 12, "v5e:2x2", unverified=True),
    prefill_uploader("cpu-2", 13, None, unverified=True),
    "prefiller host=x",  # not a prefill: its first word differs
    "xla_cache/1.0 torch_xla",
    None,
]


def test_the_counts_are_the_prefilled_entries_of_the_namespace(database: Database) -> None:
    rows = [
        replace(record(namespace, f"k{n}", 10), uploader=uploader)
        for namespace in ("a", "b")
        for n, uploader in enumerate(UPLOADERS * (3 if namespace == "a" else 1))
    ]
    for namespace in ("a", "b"):
        EntryRepository(database).record_new_entries([r for r in rows if r.namespace == namespace])
    prefilled = GraphVariantsRepository(database).prefilled
    for namespace in ("a", "b", "empty"):
        mine = [r.uploader for r in rows if r.namespace == namespace]
        expected = (sum(map(is_prefilled, mine)), sum(map(is_unverified, mine)))
        assert prefilled(namespace) == expected
    assert prefilled("a") == (9, 6) and prefilled("b") == (3, 2)


def test_the_count_reads_the_prefilled_index(database: Database) -> None:
    """SQLite uses a partial index only where the query names its condition as the index does."""
    if database.engine.dialect.name != "sqlite":
        return  # PostgreSQL's plan of a tiny table is a sequential scan whatever the indexes
    plans = sqlite_plans(
        database, lambda: GraphVariantsRepository(database).prefilled("a"), lambda s: "count(" in s
    )
    assert len(plans) == 1
    assert "ix_entries_prefilled" in plans[0], plans[0]
