"""POST /admin/gc: orphan blobs removed, rows without blobs dropped, with counts; work in progress kept."""

from __future__ import annotations

import os
import time

from fastapi.testclient import TestClient

from cache_server.settings import Settings
from cache_server.storage.base import blob_name
from cache_server.wiring import Services
from tests.support.api import put_ok, sha


def orphan(services: Services, namespace: str, key: str, data: bytes) -> None:
    """A blob without its row: what a crash between the two writes leaves."""
    assert services.store.put(blob_name(namespace, key), [data], {"sha256": sha(data)})


def test_orphans_removed_and_lost_rows_dropped(
    client: TestClient, services: Services, settings: Settings
) -> None:
    for key in ("a", "b", "c"):
        put_ok(client, "ns", key, key.encode() * 100)
    orphan(services, "ns", "crashed", b"x" * 300)
    orphan(services, "never-registered", "o", b"y" * 50)
    (settings.data_dir / "blobs" / "ns" / "b").unlink()  # a row whose blob is gone

    dry = client.post("/admin/gc", json={"grace_seconds": 0, "dry_run": True}).json()
    assert (dry["orphan_blobs_removed"], dry["rows_dropped"], dry["dry_run"]) == (2, 1, True)
    assert services.store.stat(blob_name("ns", "crashed")) is not None  # nothing removed on a dry run

    body = client.post("/admin/gc", json={"grace_seconds": 0}).json()
    assert body == {
        "blobs_checked": 4,
        "rows_checked": 3,
        "orphan_blobs_removed": 2,
        "orphan_bytes_removed": 350,
        "rows_dropped": 1,
        "temp_files_removed": 0,
        "packs_checked": 0,
        "packs_removed": 0,
        "pack_bytes_removed": 0,
        "dry_run": False,
        "damaged_blobs": 0,
    }
    assert services.store.stat(blob_name("ns", "crashed")) is None
    assert services.store.stat(blob_name("never-registered", "o")) is None
    assert client.head("/v1/namespaces/ns/entries/b").status_code == 404
    assert {e["key"] for e in client.get("/v1/namespaces/ns/manifest").json()["entries"]} == {"a", "c"}
    again = client.post("/admin/gc", json={"grace_seconds": 0}).json()
    assert (again["orphan_blobs_removed"], again["rows_dropped"]) == (0, 0)


def test_young_blobs_are_not_orphans(client: TestClient, services: Services) -> None:
    """A blob whose row is still on its way (written first, by design) survives the default grace period."""
    orphan(services, "ns", "uploading", b"z" * 10)
    body = client.post("/admin/gc").json()  # default grace: an hour
    assert body["blobs_checked"] == 1 and body["orphan_blobs_removed"] == 0
    assert services.store.stat(blob_name("ns", "uploading")) is not None


def test_stale_temp_files_of_dead_uploads_go(client: TestClient, settings: Settings) -> None:
    tmp = settings.data_dir / "blobs" / ".tmp"
    stale, fresh = tmp / "dead.part", tmp / "live.part"
    stale.write_bytes(b"half an upload")
    fresh.write_bytes(b"an upload in progress")
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    assert client.post("/admin/gc", json={"grace_seconds": 0}).json()["temp_files_removed"] == 1
    assert not stale.exists() and fresh.exists()  # an upload in progress: never under five minutes old


def test_temp_files_follow_the_grace_period(client: TestClient, settings: Settings) -> None:
    """A crash leftover goes once it is older than the grace period asked for, not after a fixed hour."""
    leftover = settings.data_dir / "blobs" / ".tmp" / "crashed.part"
    leftover.write_bytes(b"half an upload")
    twenty_minutes_ago = time.time() - 1200
    os.utime(leftover, (twenty_minutes_ago, twenty_minutes_ago))
    assert client.post("/admin/gc", json={"grace_seconds": 1800}).json()["temp_files_removed"] == 0
    assert client.post("/admin/gc", json={"grace_seconds": 600}).json()["temp_files_removed"] == 1
    assert not leftover.exists()
