"""Packs in tests (cache_server.service.packs): entries to push in one bulk upload into namespace ``ns``, what
a bundle of them gives back, and where the index and the local store keep their copies."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cache_server.storage.base import PACK_DIR, blob_name
from cache_server.storage.gcs import GcsBlobStore
from tests.support.api import member, tar_of
from tests.support.apps import services_of

__all__ = [
    "NS",
    "URL",
    "bundle",
    "count_gcs_reads",
    "drop_own_blobs",
    "entries",
    "locations",
    "packs",
    "push",
]

NS = "ns"
URL = f"/v1/namespaces/{NS}"


def entries(count: int, size: int = 3000, tag: str = "") -> dict[str, bytes]:
    return {f"k{i:04d}": os.urandom(size - i % 7) + tag.encode() for i in range(count)}


def push(client: TestClient, data: dict[str, bytes]) -> dict[str, int]:
    stream = tar_of([member(key, value) for key, value in data.items()])
    response = client.post(f"{URL}/entries", content=stream, headers={"Content-Type": "application/x-tar"})
    assert response.status_code == 200, response.text
    return {result["key"]: result["status"] for result in response.json()["results"]}


def bundle(client: TestClient, keys: list[str]) -> dict[str, bytes]:
    response = client.post(f"{URL}/bundle", json={"keys": keys})
    assert response.status_code == 200, response.text
    with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
        out: dict[str, bytes] = {}
        for info in tar.getmembers():
            handle = tar.extractfile(info)
            assert handle is not None
            out[info.name] = handle.read()
    return out


def packs(tmp_path: Path) -> dict[str, bytes]:
    directory = tmp_path / "data" / "blobs" / PACK_DIR
    return {path.name: path.read_bytes() for path in directory.iterdir()} if directory.is_dir() else {}


def locations(client: TestClient, keys: list[str]) -> dict[str, tuple[str, int]]:
    found = services_of(client).cache._entries.get_entries(NS, keys)
    return {
        key: (entry.pack, entry.pack_offset)
        for key, entry in found.items()
        if entry.pack is not None and entry.pack_offset is not None
    }


def drop_own_blobs(client: TestClient, keys: list[str]) -> None:
    """Remove the entries' own blobs (not their rows): a bundle can then only have read the packs."""
    for key in keys:
        assert services_of(client).store.delete(blob_name(NS, key))


def count_gcs_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """From now on, how often the GCS store reads a pack range, a whole blob, or opens one."""
    calls: dict[str, int] = {"read_pack": 0, "read_whole": 0, "open": 0}
    for name in calls:
        original = getattr(GcsBlobStore, name)

        def counted(
            self: GcsBlobStore, *args: object, _name: str = name, _original: Any = original
        ) -> object:
            calls[_name] += 1
            return _original(self, *args)

        monkeypatch.setattr(GcsBlobStore, name, counted)
    return calls
