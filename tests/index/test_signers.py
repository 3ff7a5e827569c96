"""The index's signer queries on SQLite and PostgreSQL: a signature kept with its row and fed to followers,
entries and bytes per signer, and the entries of one signer (or the unsigned ones) for a purge."""

from __future__ import annotations

import dataclasses

from cache_server.index import AdminRepository, Database, EntryRepository
from cache_server.index.feed import FeedRepository
from tests.support.entry_records import record

SIGNATURE = "0123456789abcdef:" + "A" * 86 + "=="


def test_signatures_are_kept_counted_per_signer_and_found_for_a_purge(database: Database) -> None:
    entries, admin = EntryRepository(database), AdminRepository(database)
    signed = [
        dataclasses.replace(record("ns", f"s{i}", 100), signer=SIGNATURE[:16], signature=SIGNATURE)
        for i in range(3)
    ]
    entries.record_new_entries([*signed, record("ns", "plain", 7)])
    row = entries.get_entry("ns", "s0")
    assert row is not None and (row.signer, row.signature) == (SIGNATURE[:16], SIGNATURE)
    assert {r.key: r.signature for r in entries.manifest("ns", max_bytes=None, max_entries=None)} == {
        "s0": SIGNATURE,
        "s1": SIGNATURE,
        "s2": SIGNATURE,
        "plain": None,
    }
    assert {f.key: f.signature for f in FeedRepository(database).feed("ns", 0, 10)}["s1"] == SIGNATURE
    assert admin.stored_by_signer() == {SIGNATURE[:16]: (3, 300), None: (1, 7)}
    assert sorted(c.key for c in admin.iter_signed_by(SIGNATURE[:16])) == ["s0", "s1", "s2"]
    assert [c.key for c in admin.iter_signed_by(None)] == ["plain"]
    assert list(admin.iter_signed_by("ffffffffffffffff")) == []
