"""Index queries on both databases."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from cache_server.domain import utcnow
from cache_server.index.database import IN_CHUNK
from cache_server.index.entries import AccessDelta, EntryRecord, EntryRepository
from cache_server.index.namespaces import NamespaceRepository


def record(repo: EntryRepository, key: str, size: int = 10, *, replace: bool = True, ns: str = "ns") -> bool:
    entry = EntryRecord(ns, key, size, "a" * 64, utcnow(), compile_time_ms=5, uploader="host-1")
    return repo.record_entry(entry, replace=replace)


def test_namespace_round_trip_keeps_json(repo: EntryRepository, namespaces: NamespaceRepository) -> None:
    fingerprint = {"torch_xla": "2.7.0", "nested": {"devices": [0, 1]}, "spmd": True}
    summary, created = namespaces.upsert_namespace("ns", fingerprint, {"team": "x"}, now=utcnow())
    assert created and summary.fingerprint == fingerprint
    summary, created = namespaces.upsert_namespace("ns", {"other": 1}, {}, now=utcnow())
    assert not created and summary.fingerprint == {"other": 1}
    assert summary.created_at.tzinfo is not None


def test_record_entry_then_missing_and_manifest(repo: EntryRepository) -> None:
    assert record(repo, "a", 5)
    assert record(repo, "b", 7)
    assert not record(repo, "a", 99, replace=False)  # an existing row wins for a non-creator
    entry = repo.get_entry("ns", "a")
    assert entry is not None and entry.size == 5 and entry.uploader == "host-1"
    assert repo.missing_keys("ns", ["a", "x", "b", "y"]) == ["x", "y"]
    # no hits yet: the most recently used comes first
    assert [e.key for e in repo.manifest("ns", max_bytes=None, max_entries=None)] == ["b", "a"]


@pytest.mark.slow
def test_missing_over_many_keys(repo: EntryRepository) -> None:
    for i in range(0, 1200, 3):
        record(repo, f"k{i}")
    keys = [f"k{i}" for i in range(1200)]
    assert repo.missing_keys("ns", keys) == [k for i, k in enumerate(keys) if i % 3]


def test_access_batches_add_up(repo: EntryRepository, namespaces: NamespaceRepository) -> None:
    record(repo, "a")
    now = utcnow()
    repo.apply_access(
        {("ns", "a"): AccessDelta(hits=3, bytes_served=30, last_access=now)}, {"ns": 2}, day=now.date()
    )
    repo.apply_access(
        {("ns", "a"): AccessDelta(hits=1, bytes_served=10, last_access=now)}, {}, day=now.date()
    )
    entry = repo.get_entry("ns", "a")
    summary = namespaces.get_namespace("ns")
    assert entry is not None and entry.hits == 4
    assert summary is not None
    assert (summary.counters.hits, summary.counters.misses, summary.counters.bytes_served) == (4, 2, 40)


def test_concurrent_record_of_one_key(repo: EntryRepository, namespaces: NamespaceRepository) -> None:
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: record(repo, "same", replace=False), range(16)))
    assert results.count(True) == 1
    summary = namespaces.get_namespace("ns")
    assert summary is not None and summary.entries == 1


def test_delete_entry(repo: EntryRepository) -> None:
    record(repo, "a")
    removed = repo.delete_entry("ns", "a", policy="admin", when=utcnow())
    assert removed is not None and removed.key == "a"
    assert repo.delete_entry("ns", "a", policy="admin", when=utcnow()) is None
    assert repo.get_entry("ns", "a") is None


def test_add_missing_entries_keeps_existing_rows(
    repo: EntryRepository, namespaces: NamespaceRepository
) -> None:
    record(repo, "k0", 10)  # already indexed, with its hits: it must win
    repo.apply_access(
        {("ns", "k0"): AccessDelta(hits=5, bytes_served=50, last_access=utcnow())}, {}, day=utcnow().date()
    )
    count = IN_CHUNK * 2 + 7  # several INSERTs
    found = [
        EntryRecord(
            namespace="other" if i % 2 else "ns", key=f"k{i}", size=i, sha256="b" * 64, created_at=utcnow()
        )
        for i in range(count)
    ]
    assert repo.add_missing_entries(found) == count - 1
    assert repo.add_missing_entries(found) == 0
    kept = repo.get_entry("ns", "k0")
    assert kept is not None and (kept.size, kept.sha256, kept.hits) == (10, "a" * 64, 5)
    ns, other = namespaces.get_namespace("ns"), namespaces.get_namespace("other")
    assert ns is not None and ns.entries == (count + 1) // 2
    assert other is not None and other.entries == count // 2
    assert other.fingerprint == {} and other.counters.uploads == 0
