"""The ``backend`` fixture: every test that takes it runs once per blob store, unchanged."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cache_server.storage.base import BlobStore
from cache_server.storage.gcs import GcsBlobStore
from cache_server.storage.local import LocalBlobStore
from tests.support.gcs_emulator import (  # noqa: F401 - fixtures
    fake_gcs_endpoint,
    gcs_bucket,
    object_names,
)


@dataclass
class Backend:
    """A store under test, and a way to see everything it physically keeps (blobs, temp files, sessions)."""

    kind: str
    store: BlobStore
    stored_files: Callable[[], list[str]]


def _local_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


@pytest.fixture(params=["local", "gcs"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "local":
        root = tmp_path / "blobs"
        yield Backend("local", LocalBlobStore(root), lambda: _local_files(root))
        return
    endpoint: str = request.getfixturevalue("fake_gcs_endpoint")
    bucket: str = request.getfixturevalue("gcs_bucket")
    store = GcsBlobStore(bucket, "cache/v1", endpoint=endpoint, retries=2, backoff=0.05)
    try:
        yield Backend("gcs", store, lambda: object_names(endpoint, bucket))
    finally:
        store.close()
