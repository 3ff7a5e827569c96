"""The admin side's queries on SQLite and PostgreSQL: counters, daily rollup, graphs, eviction, tokens."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from cache_server.admin.stats import StatsQuery
from cache_server.auth.tokens import Role
from cache_server.domain import utcnow
from cache_server.errors import Unauthorized
from cache_server.index import AdminRepository
from cache_server.service import OpenedEntry
from cache_server.settings import Settings
from cache_server.wiring import Services, build_services
from tests.support.clock import clear_of_utc_midnight
from tests.support.real_entries import real_entries


@pytest.fixture
def services(migrated_settings: Settings) -> Iterator[Services]:
    built = build_services(migrated_settings)
    yield built
    built.stop()


def put(services: Services, namespace: str, key: str, data: bytes, compile_ms: int | None = None) -> None:
    digest = hashlib.sha256(data).hexdigest()
    services.cache.put_entry(namespace, key, [data], sha256=digest, compile_time_ms=compile_ms)


def read(services: Services, namespace: str, key: str) -> None:
    opened = services.cache.read_entry(namespace, key)
    assert isinstance(opened, OpenedEntry)
    assert b"".join(opened.body)


def test_counters_rollup_and_graphs(services: Services) -> None:
    clear_of_utc_midnight()  # the writes and the report's last day must be one UTC day
    for key, data in real_entries().items():
        put(services, "cpu", key, data, compile_ms=5000)
    put(services, "cpu", "opaque", b"not an executable")
    first = next(iter(real_entries()))
    for _ in range(2):
        read(services, "cpu", first)
    services.access.miss("cpu", 3)
    assert services.parsing.catch_up() == 5
    report = services.admin.stats(StatsQuery(days=3, top=5))
    totals = report.totals.counters
    assert (report.totals.entries, totals.hits, totals.misses, totals.uploads) == (5, 2, 3, 5)
    assert totals.compile_ms_saved == 10_000
    assert totals.bytes_uploaded == report.totals.bytes
    assert [d.counters.hits for d in report.daily] == [0, 0, 2] and report.daily[-1].counters.uploads == 5
    graphs = report.top_graphs
    assert [(g.module, g.variants, g.entries) for g in graphs] == [
        ("SyncTensorsGraph.15", 3, 3),
        ("SyncTensorsGraph.12", 1, 1),
    ]
    assert len(graphs[0].examples) == 3


def test_eviction_counts_once_and_keeps_the_recently_used(services: Services) -> None:
    for i in range(12):
        put(services, "ns", f"k{i:02d}", bytes([i]) * 100)
    read(services, "ns", "k00")  # the oldest, used now
    result = services.evictor.evict(max_total_bytes=500)
    assert (result.evicted, result.freed_bytes) == (7, 700)
    keys = [f"k{i:02d}" for i in range(12)]
    assert set(keys) - set(services.cache.missing("ns", keys)) == {
        "k00",
        "k08",
        "k09",
        "k10",
        "k11",
    }
    repository = AdminRepository(services.database)
    again = repository.delete_entries(
        [("ns", "k01"), ("ns", "k08")], policy="lru", when=utcnow(), count_evictions=True
    )
    assert again == [("ns", "k08", 100)]  # k01 was already gone: not deleted, not counted twice
    assert services.admin.stats().totals.counters.evictions == 8


def test_tokens(services: Services) -> None:
    tokens = services.tokens
    token, info = tokens.create("ops", Role.ADMIN)
    assert tokens.authenticate(token).role is Role.ADMIN
    assert [t.name for t in tokens.revoke("ops")] == ["ops"]
    with pytest.raises(Unauthorized):
        tokens.authenticate(token)
    assert [t.revoked_at is not None for t in tokens.list_tokens()] == [True]
    assert info.id in token


def test_loose_entries_page_in_key_order_and_placing_copies_is_conditional(services: Services) -> None:
    """Packing later's two queries: pages of the small entries without a pack, in (namespace, key) order;
    rows pointed into a pack only where they still have none and the same digest."""
    repository: AdminRepository = services.admin._repository
    for namespace in ("b", "a"):
        for i in range(3):
            put(services, namespace, f"k{i}", f"{namespace}{i}".encode() * 10)
    put(services, "a", "big", b"x" * 2000)
    first = repository.loose_entries(max_size=1000, after=None, limit=4)
    assert [(e.namespace, e.key) for e in first] == [("a", "k0"), ("a", "k1"), ("a", "k2"), ("b", "k0")]
    across = repository.loose_entries(max_size=1000, after=("a", "k2"), limit=2)
    assert [(e.namespace, e.key) for e in across] == [("b", "k0"), ("b", "k1")]  # (namespace, key) order
    rest = repository.loose_entries(max_size=1000, after=("b", "k0"), limit=4)
    assert [(e.namespace, e.key) for e in rest] == [("b", "k1"), ("b", "k2")]

    services.cache.delete_entry("a", "k1")
    put(services, "a", "k1", b"other bytes")  # stored again: another digest
    placed = repository.place_copies("f" * 32, [(e, 10 * i) for i, e in enumerate(first)])
    assert placed == 3  # not the row stored again
    assert repository.place_copies("e" * 32, [(first[0], 0)]) == 0  # already in a pack
    loose = repository.loose_entries(max_size=10**6, after=None, limit=10)
    assert [(e.namespace, e.key) for e in loose] == [("a", "big"), ("a", "k1"), ("b", "k1"), ("b", "k2")]
    rows = [
        *services.cache._entries.get_entries("a", ["k0", "k1", "k2"]).values(),
        *services.cache._entries.get_entries("b", ["k0"]).values(),
    ]
    assert sorted((e.namespace, e.key, e.pack, e.pack_offset) for e in rows) == [
        ("a", "k0", "f" * 32, 0),
        ("a", "k1", None, None),
        ("a", "k2", "f" * 32, 20),
        ("b", "k0", "f" * 32, 30),
    ]


def test_graphs_are_ranked_by_the_compile_seconds_paid_then_compiles(services: Services) -> None:
    """Issue 46, item 2: a graph of one variant that cost a minute to compile ranks above a graph of three
    cheap variants, in the stats' top graphs and in the bucketing report; variants stay a column."""
    costly = "304900209432311687315369713663855754870"  # SyncTensorsGraph.12, the one variant
    for key, data in real_entries().items():
        put(services, "cpu", key, data, compile_ms=60_000 if key == costly else 1000)
    assert services.parsing.catch_up() == 4
    expected = [("SyncTensorsGraph.12", 1, 1, 60.0), ("SyncTensorsGraph.15", 3, 3, 3.0)]
    for namespace in ("cpu", None):
        graphs = services.admin.stats(StatsQuery(days=1, top=5, namespace=namespace)).top_graphs
        assert [(g.module, g.variants, g.entries, g.compile_seconds) for g in graphs] == expected
    reports = services.graphs.report("cpu", top=5, per_graph=10, total=100)
    assert [(r.module, r.variants, r.entries, r.compile_seconds) for r in reports] == expected


def test_the_cost_ranking_follows_evictions_and_overwrites(services: Services) -> None:
    """The ranking reads each graph's compile ms as the index keeps it (``graph_counts``, migration 0021):
    the costly entry evicted, its graph falls behind; stored again at another cost, that cost counts."""
    costly = "304900209432311687315369713663855754870"  # SyncTensorsGraph.12, the one variant
    data = real_entries()
    for key, body in data.items():
        put(services, "cpu", key, body, compile_ms=60_000 if key == costly else 1000)
    assert services.parsing.catch_up() == 4
    services.cache.delete_entry("cpu", costly)
    graphs = services.admin.stats(StatsQuery(days=1, top=5, namespace="cpu")).top_graphs
    assert [(g.module, g.entries, g.compile_seconds) for g in graphs] == [("SyncTensorsGraph.15", 3, 3.0)]
    put(services, "cpu", costly, data[costly], compile_ms=2500)
    assert services.parsing.catch_up() == 1
    reports = services.graphs.report("cpu", top=5, per_graph=10, total=100)
    assert [(r.module, r.entries, r.compile_seconds) for r in reports] == [
        ("SyncTensorsGraph.15", 3, 3.0),
        ("SyncTensorsGraph.12", 1, 2.5),
    ]
