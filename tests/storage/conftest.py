"""The ``backend`` fixture: every test that takes it runs once per blob store, unchanged."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cache_server.storage.gcs import GcsBlobStore
from cache_server.storage.local import LocalBlobStore
from tests.support.backends import Backend
from tests.support.gcs_emulator import (  # noqa: F401 - fixtures
    fake_gcs_endpoint,
    gcs_bucket,
    object_names,
    put_object,
)


def _local_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def _plant_file(root: Path, relative: str, data: bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _abandon_local_upload(root: Path, age_seconds: float) -> None:
    path = root / ".tmp" / f"{uuid.uuid4().hex}.part"
    path.write_bytes(b"\0" * 4096 + b"half an upload")
    then = time.time() - age_seconds
    os.utime(path, (then, then))


@pytest.fixture(params=["local", "gcs"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "local":
        root = tmp_path / "blobs"
        local = LocalBlobStore(root)
        yield Backend(
            "local",
            local,
            lambda: _local_files(root),
            lambda rel, data: _plant_file(root, rel, data),
            lambda age: _abandon_local_upload(root, age),
        )
        return
    endpoint: str = request.getfixturevalue("fake_gcs_endpoint")
    bucket: str = request.getfixturevalue("gcs_bucket")
    store = GcsBlobStore(bucket, "cache/v1", endpoint=endpoint, retries=2, backoff=0.05)

    def plant(relative: str, data: bytes) -> None:
        put_object(endpoint, bucket, f"cache/v1/{relative}", data)

    try:
        yield Backend("gcs", store, lambda: object_names(endpoint, bucket), plant)
    finally:
        store.close()
