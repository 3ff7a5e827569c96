"""Where the rules of an upload meet (issue 25, from the review of its merged parts): revocation with the
adoption of an orphan, quotas with packs, the taken-name rules with a row written meanwhile, quotas with a
restored blob, and a slow bulk group against the orphan grace period. In process, each case hit every time."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cache_protocol.tar import END, TarReader
from cache_server.app import create_app
from cache_server.errors import DigestConflict, QuotaExceeded, TokenRevoked
from cache_server.index.entries import EntryRecord
from cache_server.service import OpenedEntry
from cache_server.settings import Settings
from cache_server.storage.base import blob_name
from cache_server.storage.local import MAGIC
from cache_server.wiring import Services, build_services
from tests.support.api import sha, stream_member
from tests.support.migrated import migrated

NS = "team-a"
TOKEN, OTHER = "0123456789ab", "ba9876543210"  # token ids, as a blob's metadata names its uploader


@contextmanager
def running(tmp_path: Path, **overrides: Any) -> Iterator[Services]:
    """The server's parts over a fresh embedded index and store, with these settings (no background gc)."""
    settings = Settings(
        data_dir=tmp_path / "data", access_flush_seconds=60.0, gc_interval_seconds=0, **overrides
    )
    migrated(settings)
    services = build_services(settings)
    try:
        yield services
    finally:
        services.stop()


def reader(pieces: Iterator[bytes]) -> TarReader:
    return TarReader(lambda _size: next(pieces, b""))


def orphan(services: Services, key: str, data: bytes, stored_by: str) -> None:
    """A blob without a row, as an upload of ``stored_by`` that died before its row leaves it."""
    created = dt.datetime.now(dt.timezone.utc).isoformat()
    meta = {"namespace": NS, "key": key, "sha256": sha(data), "created": created, "stored_by": stored_by}
    services.cache._store.put(blob_name(NS, key), [data], meta)


def test_a_revoked_put_takes_back_the_orphan_of_its_own_token_it_adopted(tmp_path: Path) -> None:
    with running(tmp_path) as services:
        data = b"left by the leaked token"
        orphan(services, "k1", data, stored_by=TOKEN)
        with pytest.raises(TokenRevoked):
            services.cache.put_entry(
                NS, "k1", [data], sha256=sha(data), stored_by=TOKEN, still_allowed=lambda: False
            )
        assert services.cache.manifest(NS) == []
        assert services.cache._store.stat(blob_name(NS, "k1")) is None


def test_a_revoked_bulk_group_takes_back_the_orphans_of_its_own_token_it_adopted(tmp_path: Path) -> None:
    with running(tmp_path) as services:
        data = b"left by the leaked token, two"
        orphan(services, "k2", data, stored_by=TOKEN)
        answers = iter([True, False])  # active before the group's commit, revoked right after it
        with pytest.raises(TokenRevoked):
            services.cache.put_entries(
                NS,
                reader(iter([stream_member("k2", data) + END])).members(),
                stored_by=TOKEN,
                still_allowed=lambda: next(answers, False),
            )
        assert services.cache.manifest(NS) == []


def test_an_orphan_of_another_token_adopted_by_a_revoked_upload_stays(tmp_path: Path) -> None:
    with running(tmp_path) as services:
        data = b"another token's build"
        orphan(services, "k3", data, stored_by=OTHER)
        with pytest.raises(TokenRevoked):
            services.cache.put_entry(
                NS, "k3", [data], sha256=sha(data), stored_by=TOKEN, still_allowed=lambda: False
            )
        assert [entry.key for entry in services.cache.manifest(NS)] == ["k3"]  # the purge is of TOKEN alone


def test_a_quota_holds_across_the_commits_a_full_pack_makes(tmp_path: Path) -> None:
    with running(tmp_path, packs=True) as services:
        services.quotas.set_quota("namespace", NS, max_entries=33, max_bytes=None)
        datas = [os.urandom(1024 * 1024) for _ in range(40)]  # a pack fills, and commits, every 32 MiB
        pieces = iter([stream_member(f"k{i}", data) for i, data in enumerate(datas)] + [END])
        result = services.cache.put_entries(NS, reader(pieces).members())
        refused = [outcome.error for outcome in result.results if outcome.stored is None]
        assert result.stored == 33 and len(refused) == 7
        assert all(isinstance(error, QuotaExceeded) for error in refused)
        assert len(services.cache.manifest(NS)) == 33


def test_a_row_written_while_a_put_arrives_is_not_overwritten(tmp_path: Path) -> None:
    with running(tmp_path, orphan_grace_seconds=0) as services:
        first, second = b"first build", b"second build"
        orphan(services, "k", first, stored_by="")  # the first upload's blob, its row not written yet
        entries = services.cache._entries

        def body() -> Iterator[bytes]:
            yield second[:5]
            now = dt.datetime.now(dt.timezone.utc)  # meanwhile the first upload writes its row
            entries.record_new_entries(
                [EntryRecord(namespace=NS, key="k", size=len(first), sha256=sha(first), created_at=now)]
            )
            yield second[5:]

        with pytest.raises(DigestConflict):
            services.cache.put_entry(NS, "k", body(), sha256=sha(second), declared_size=len(second))
        row = entries.get_entry(NS, "k")
        assert row is not None and row.sha256 == sha(first)
        stored = services.cache._store.stat(blob_name(NS, "k"))
        assert stored is not None and stored.metadata["sha256"] == sha(first)


def test_a_put_without_length_restoring_its_own_damaged_blob_adds_nothing_to_a_quota(tmp_path: Path) -> None:
    with running(tmp_path) as services:
        data = os.urandom(1000)
        services.cache.put_entry(NS, "k", [data], sha256=sha(data), declared_size=len(data))
        services.quotas.set_quota("namespace", NS, max_entries=None, max_bytes=1500)
        path = tmp_path / "data" / "blobs" / NS / "k"
        raw = bytearray(path.read_bytes())
        raw[len(MAGIC)] = ord("[")  # its header's JSON no longer parses
        path.write_bytes(bytes(raw))
        result = services.cache.put_entry(NS, "k", iter([data]), sha256=sha(data))  # chunked: no length
        assert result.created
        reread = services.cache.read_entry(NS, "k")
        assert isinstance(reread, OpenedEntry) and b"".join(reread.body) == data


def test_a_bulk_group_open_a_quarter_of_the_orphan_grace_is_committed_at_the_next_member(
    tmp_path: Path,
) -> None:
    with running(tmp_path, orphan_grace_seconds=0) as services:  # every group is "old" at once
        indexed_when_asked: list[list[str]] = []

        def pieces() -> Iterator[bytes]:
            for index in range(3):
                indexed_when_asked.append([entry.key for entry in services.cache.manifest(NS)])
                yield stream_member(f"k{index}", b"entry %d" % index)
            yield END

        result = services.cache.put_entries(NS, reader(pieces()).members())
        assert result.stored == 3
        # by the time the stream is read past a member, that member's row is written (today's groups of 512
        # would have written all three at the end)
        assert [sorted(keys) for keys in indexed_when_asked] == [[], ["k0"], ["k0", "k1"]]


def test_a_stats_cursor_padded_with_zeros_is_a_400(tmp_path: Path) -> None:
    with running(tmp_path) as services:
        settings = Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0, gc_interval_seconds=0)
        with TestClient(create_app(settings, services)) as client:
            for after in ("0" * 20 + "9" * 20 + ":x", "1" * 5000 + ":x"):
                answer = client.get("/admin/stats", params={"after": after})
                assert answer.status_code == 400, answer.text
                assert answer.json()["error"] == "bad_request"
