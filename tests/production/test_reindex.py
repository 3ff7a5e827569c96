"""``xla-cache-server reindex``: a lost index comes back from the blobs' metadata, on every backend."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cache_protocol import SHA256_HEADER
from cache_server.admin.reindex import Reindexer
from cache_server.app import create_app
from cache_server.domain import utcnow
from cache_server.index import Database, EntryRepository
from cache_server.index.migrate import downgrade
from cache_server.index.namespaces import NamespaceRepository
from cache_server.settings import Settings
from cache_server.storage.local import LocalBlobStore
from cache_server.wiring import build_services
from tests.support.api import sha
from tests.support.deployment import Deployment
from tests.support.migrated import migrated

DEPLOYMENTS = ["sqlite-local", "postgresql-local", "sqlite-gcs", "postgresql-gcs"]

ENTRIES = {
    ("vision", "1111"): os.urandom(3000),
    ("vision", "2222"): os.urandom(1536 * 1024),
    ("text", "3333"): b"",
}


@pytest.mark.parametrize("deployment", DEPLOYMENTS, indirect=True)
def test_lost_index_is_rebuilt_from_storage(deployment: Deployment, tmp_path: Path) -> None:
    settings = deployment.settings(tmp_path / "data", access_flush_seconds=60.0)
    migrated(settings)
    services = build_services(settings)
    with TestClient(create_app(settings, services)) as client:
        for (ns, key), data in ENTRIES.items():
            put = client.put(
                f"/v1/namespaces/{ns}/entries/{key}",
                content=data,
                headers={SHA256_HEADER: sha(data), "X-Compile-Time-Ms": "4200", "X-Uploader": "host-7"},
            )
            assert put.status_code == 201
        manifests = {ns: client.get(f"/v1/namespaces/{ns}/manifest").json() for ns in ("vision", "text")}
        rows = {ident: services.cache.head_entry(*ident) for ident in ENTRIES}

    downgrade(settings, "base")  # the index is lost: no tables, no rows
    done = deployment.cli(tmp_path / "data", "reindex")
    assert done.returncode == 0, done.stderr
    assert "3 blobs in 2 namespaces" in done.stdout
    assert "3 rows added, 0 already indexed, 0 skipped" in done.stdout

    services = build_services(settings)
    with TestClient(create_app(settings, services)) as client:
        for ns, before in manifests.items():
            after = client.get(f"/v1/namespaces/{ns}/manifest").json()
            assert sorted(after["entries"], key=str) == sorted(before["entries"], key=str)
            assert after["total_bytes"] == before["total_bytes"]
            summary = client.get(f"/v1/namespaces/{ns}").json()
            assert summary["entries"] == len(before["entries"])
            assert summary["bytes"] == before["total_bytes"]
        for (ns, key), data in ENTRIES.items():
            got = client.get(f"/v1/namespaces/{ns}/entries/{key}")
            assert got.status_code == 200
            assert got.headers[SHA256_HEADER] == sha(data) == sha(got.content)
        for ident, before_row in rows.items():
            row = services.cache.head_entry(*ident)
            assert (row.size, row.sha256, row.created_at, row.compile_time_ms, row.uploader) == (
                before_row.size,
                before_row.sha256,
                before_row.created_at,
                4200,
                "host-7",
            )

    services = build_services(settings)
    try:
        again = services.reindexer.run()  # on a healthy index: changes nothing
    finally:
        services.stop()
    assert (again.blobs, again.added, again.already_indexed) == (3, 0, 3)


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[Database, LocalBlobStore]]:
    settings = Settings(data_dir=tmp_path / "data")
    migrated(settings)
    database = Database.from_settings(settings)
    yield database, LocalBlobStore(tmp_path / "blobs")
    database.dispose()


def meta(ns: str, key: str, digest: str | None) -> dict[str, str]:
    found = {"namespace": ns, "key": key, "created": "2024-05-01T12:00:00+00:00"}
    if digest is not None:
        found["sha256"] = digest
    return found


def test_untrustworthy_blobs_are_left_out_and_verify_decides(
    local: tuple[Database, LocalBlobStore],
) -> None:
    database, store = local
    repo = EntryRepository(database)
    reindexer = Reindexer(repo, store)
    store.put("ns/good", [b"good"], meta("ns", "good", sha(b"good")))
    store.put("ns/nodigest", [b"old"], meta("ns", "nodigest", None))
    store.put("ns/rotten", [b"bit flipped"], meta("ns", "rotten", sha(b"original")))
    store.put("ns/moved", [b"x"], meta("ns", "elsewhere", sha(b"x")))

    dry = reindexer.run(dry_run=True)
    assert (dry.blobs, dry.added) == (4, 2)
    assert NamespaceRepository(database).get_namespace("ns") is None  # a dry run writes nothing

    plain = reindexer.run()
    assert plain.added == 2  # good, and rotten (its metadata is trusted without --verify)
    assert set(plain.skipped) == {"ns/nodigest", "ns/moved"}
    assert "no sha256" in plain.skipped["ns/nodigest"]
    assert "ns/elsewhere" in plain.skipped["ns/moved"]
    good = repo.get_entry("ns", "good")
    assert good is not None and good.created_at.isoformat() == "2024-05-01T12:00:00+00:00"

    repo.delete_entry("ns", "rotten", policy="admin", when=utcnow())
    verified = reindexer.run(verify=True)
    assert verified.added == 1 and verified.already_indexed == 1
    assert set(verified.skipped) == {"ns/rotten", "ns/moved"}
    assert "hash to" in verified.skipped["ns/rotten"]
    healed = repo.get_entry("ns", "nodigest")
    assert healed is not None and healed.sha256 == sha(b"old")
    assert repo.get_entry("ns", "rotten") is None
