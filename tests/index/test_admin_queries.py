"""The admin side's queries on SQLite and PostgreSQL: counters, daily rollup, graphs, eviction, tokens."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from cache_server.admin import AdminService
from cache_server.app import build_service
from cache_server.auth import Role
from cache_server.errors import Unauthorized
from cache_server.migrate import upgrade
from cache_server.service import CacheService
from cache_server.settings import Settings
from tests.admin.conftest import real_entries
from tests.support.clock import clear_of_utc_midnight


@pytest.fixture
def admin(db_settings: Settings) -> Iterator[AdminService]:
    upgrade(db_settings)
    service: CacheService = build_service(db_settings)
    yield AdminService(db_settings, service)
    service.stop()


def put(admin: AdminService, namespace: str, key: str, data: bytes, compile_ms: int | None = None) -> None:
    digest = hashlib.sha256(data).hexdigest()
    admin.service.put_entry(namespace, key, [data], sha256=digest, compile_time_ms=compile_ms)


def test_counters_rollup_and_graphs(admin: AdminService) -> None:
    clear_of_utc_midnight()  # the writes and the report's last day must be one UTC day
    for key, data in real_entries().items():
        put(admin, "cpu", key, data, compile_ms=5000)
    put(admin, "cpu", "opaque", b"not an executable")
    first = next(iter(real_entries()))
    for _ in range(2):
        admin.service.open_entry("cpu", first)
    admin.service.access.miss("cpu", 3)
    assert admin.graphs.catch_up() == 5
    report = admin.stats(days=3, top=5)
    totals = report.totals
    assert (totals.entries, totals.hits, totals.misses, totals.uploads) == (5, 2, 3, 5)
    assert totals.compile_ms_saved == 10_000
    assert [d.row.hits for d in report.daily] == [0, 0, 2] and report.daily[-1].row.uploads == 5
    graphs = report.top_graphs
    assert [(g.module, g.variants, g.entries) for g in graphs] == [
        ("SyncTensorsGraph.15", 3, 3),
        ("SyncTensorsGraph.12", 1, 1),
    ]
    assert len(graphs[0].examples) == 3


def test_eviction_counts_once_and_keeps_the_recently_used(admin: AdminService) -> None:
    for i in range(12):
        put(admin, "ns", f"k{i:02d}", bytes([i]) * 100)
    admin.service.open_entry("ns", "k00")  # the oldest, used now
    result = admin.evictor.evict(max_total_bytes=500)
    assert (result.evicted, result.freed_bytes) == (7, 700)
    assert set(admin.repository.get_entries("ns", [f"k{i:02d}" for i in range(12)])) == {
        "k00",
        "k08",
        "k09",
        "k10",
        "k11",
    }
    again = admin.repository.delete_entries([("ns", "k01"), ("ns", "k08")], evicted=True)
    assert again == [("ns", "k08", 100)]  # k01 was already gone: not deleted, not counted twice
    assert admin.stats().totals.evictions == 8


def test_tokens(admin: AdminService) -> None:
    token, info = admin.tokens.create("ops", Role.ADMIN)
    assert admin.tokens.authenticate(token).role is Role.ADMIN
    assert [t.name for t in admin.tokens.revoke("ops")] == ["ops"]
    with pytest.raises(Unauthorized):
        admin.tokens.authenticate(token)
    assert [t.revoked_at is not None for t in admin.tokens.list_tokens()] == [True]
    assert info.id in token
