"""More of the index's queries on both databases: manifest order and bounds, large key lists, uploads
accounting, namespaces made on the fly, listing, and timestamps."""

from __future__ import annotations

import datetime as dt

import pytest

from cache_server.domain import utcnow
from cache_server.index.database import IN_CHUNK, Database
from cache_server.index.entries import AccessDelta, EntryRecord, EntryRepository
from cache_server.index.namespaces import NamespaceRepository
from cache_server.settings import Settings


def put(
    repo: EntryRepository, key: str, size: int, *, at: dt.datetime, sha: str = "a", replace: bool = True
) -> bool:
    return repo.record_entry(EntryRecord("ns", key, size, sha * 64, at), replace=replace)


def test_manifest_orders_by_hits_then_recency_within_bounds(repo: EntryRepository) -> None:
    start = utcnow() - dt.timedelta(hours=1)
    for minute, (key, size) in enumerate([("a", 10), ("b", 20), ("c", 30), ("d", 5)]):
        put(repo, key, size, at=start + dt.timedelta(minutes=minute))
    repo.apply_access(
        {
            ("ns", "c"): AccessDelta(hits=5, bytes_served=150, last_access=start),
            ("ns", "a"): AccessDelta(hits=2, bytes_served=20, last_access=start),
        },
        {},
        day=start.date(),
    )

    def keys(**bounds: int | None) -> list[str]:
        chosen = repo.manifest("ns", max_bytes=bounds.get("max_bytes"), max_entries=bounds.get("max_entries"))
        return [e.key for e in chosen]

    assert keys() == ["c", "a", "d", "b"]  # most hits first, then the most recently used
    assert keys(max_entries=2) == ["c", "a"]
    assert keys(max_bytes=36) == ["c", "d"]  # a (10) does not fit after c (30); d (5) still does
    assert keys(max_bytes=0) == []
    assert keys(max_bytes=1000, max_entries=0) == []


def test_key_lists_longer_than_one_in_query(repo: EntryRepository, namespaces: NamespaceRepository) -> None:
    now = utcnow()
    stored = [f"k{i}" for i in range(0, 3 * IN_CHUNK, 2)]
    repo.add_missing_entries([EntryRecord("ns", key, 1, "c" * 64, now) for key in stored])
    asked = [f"k{i}" for i in range(3 * IN_CHUNK)]
    assert sorted(repo.get_entries("ns", asked)) == sorted(stored)
    assert repo.missing_keys("ns", asked) == [k for k in asked if k not in set(stored)]
    summary = namespaces.get_namespace("ns")
    assert summary is not None and (summary.entries, summary.bytes) == (len(stored), len(stored))


def test_the_creator_replaces_a_stale_row_and_counts_one_upload(
    repo: EntryRepository, namespaces: NamespaceRepository
) -> None:
    now = utcnow()
    assert put(repo, "k", 10, at=now)
    # The blob vanished and was uploaded again: its creator overwrites the stale row.
    assert put(repo, "k", 20, at=now, sha="b")
    assert not put(repo, "k", 30, at=now, sha="c", replace=False)  # a non-creator never does
    entry = repo.get_entry("ns", "k")
    assert entry is not None and (entry.size, entry.sha256) == (20, "b" * 64)
    summary = namespaces.get_namespace("ns")
    assert summary is not None and (summary.entries, summary.counters.uploads) == (1, 2)


def test_namespaces_appear_on_first_use(repo: EntryRepository, namespaces: NamespaceRepository) -> None:
    now = utcnow()
    repo.add_missing_entries(
        [EntryRecord(ns, key, 3, "d" * 64, now) for ns in ("x", "y") for key in ("2", "1")]
    )
    for name in ("x", "y"):
        found = namespaces.get_namespace(name)
        assert found is not None and (found.entries, found.bytes, found.fingerprint) == (2, 6, {})
        assert found.created_at == now
    assert sorted(e.key for e in repo.manifest("y", max_bytes=None, max_entries=None)) == ["1", "2"]
    assert namespaces.get_namespace("nothing") is None


def test_timestamps_come_back_as_the_same_instant_in_utc(repo: EntryRepository) -> None:
    elsewhere = dt.datetime(2024, 3, 5, 23, 30, 15, 123456, tzinfo=dt.timezone(dt.timedelta(hours=-7)))
    put(repo, "k", 1, at=elsewhere)
    entry = repo.get_entry("ns", "k")
    assert entry is not None
    assert entry.created_at == elsewhere
    assert entry.created_at.utcoffset() == dt.timedelta(0)
    assert entry.created_at.isoformat() == "2024-03-06T06:30:15.123456+00:00"
    # the lean rows a manifest and a bundle read carry the same instant
    [listed] = repo.manifest("ns", max_bytes=None, max_entries=None)
    assert listed.created_at == repo.get_entries("ns", ["k"])["k"].created_at == entry.created_at
    assert listed.created_at.utcoffset() == dt.timedelta(0)


# Only SQLite keeps timestamps as text (written by another tool, or CURRENT_TIMESTAMP): this one runs on it
# alone (the fixture's other parameter is left out, not skipped).
@pytest.mark.parametrize("migrated_settings", ["sqlite"], indirect=True)
def test_timestamps_written_as_other_text_still_read_as_utc(
    repo: EntryRepository, migrated_settings: Settings
) -> None:
    database = Database.from_settings(migrated_settings)  # another connection to the repository's database
    assert database.engine.dialect.name == "sqlite"
    put(repo, "k", 1, at=utcnow())
    for text, expected in [
        ("2024-03-06 06:30:15", "2024-03-06T06:30:15+00:00"),
        ("2024-03-06T06:30:15.500000+02:00", "2024-03-06T04:30:15.500000+00:00"),
    ]:
        with database.engine.begin() as connection:
            connection.exec_driver_sql("UPDATE entries SET created_at = ?", (text,))
        entry = repo.get_entry("ns", "k")
        assert entry is not None and entry.created_at.isoformat() == expected
        assert repo.get_entries("ns", ["k"])["k"].created_at.isoformat() == expected
    database.dispose()
