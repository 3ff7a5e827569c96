"""The ``backend`` fixture: every test that takes it runs once per blob store, unchanged."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from google.oauth2 import service_account

from cache_server.storage.abilities import (
    PutsInBatches,
    ReadsAhead,
    ReadsWhole,
    SignsUrls,
    StoresPacks,
    SweepsTempFiles,
)
from cache_server.storage.gcs import GcsBlobStore
from cache_server.storage.local import LocalBlobStore
from tests.support.backends import Backend
from tests.support.gcs_emulator import (  # noqa: F401 - fixtures
    fake_gcs_endpoint,
    gcs_bucket,
    object_names,
    put_object,
)
from tests.support.gcs_keys import key_info


def _local_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def _plant_file(root: Path, relative: str, data: bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _damage_local_blob(root: Path, name: str) -> None:
    """Flip one byte of the header: the opening brace of its JSON."""
    with open(root / name, "r+b") as handle:
        handle.seek(10)
        byte = handle.read(1)
        handle.seek(10)
        handle.write(bytes([byte[0] ^ 0x5A]))


def _damage_gcs_object(endpoint: str, bucket: str, name: str) -> None:
    url = f"{endpoint}/storage/v1/b/{bucket}/o/{quote(f'cache/v1/{name}', safe='')}"
    httpx.patch(url, json={"metadata": {"sha256": "not-a-digest"}}).raise_for_status()


def _abandon_local_upload(root: Path, age_seconds: float) -> None:
    path = root / ".tmp" / f"{uuid.uuid4().hex}.part"
    path.write_bytes(b"\0" * 4096 + b"half an upload")
    then = time.time() - age_seconds
    os.utime(path, (then, then))


ABILITIES_OF = {
    "local": frozenset({SweepsTempFiles, PutsInBatches, StoresPacks, ReadsWhole}),
    "gcs": frozenset({SignsUrls, PutsInBatches, StoresPacks, ReadsWhole, ReadsAhead}),
}
"""The optional abilities each backend declares (``test_backend_declares_the_optional_abilities_it_has``)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The check of an optional ability (``checks`` in test_contract.py) is collected for the backends that
    have it only: nothing is skipped."""
    kept, dropped = [], []
    for item in items:
        ability = getattr(getattr(item, "function", None), "checks_ability", None)
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("backend") if callspec is not None else None
        if ability is not None and kind in ABILITIES_OF and ability not in ABILITIES_OF[kind]:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(params=["local", "gcs"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "local":
        root = tmp_path / "blobs"
        local = LocalBlobStore(root)
        yield Backend(
            "local",
            local,
            ABILITIES_OF["local"],
            lambda: _local_files(root),
            lambda rel, data: _plant_file(root, rel, data),
            lambda age: _abandon_local_upload(root, age),
            lambda name: _damage_local_blob(root, name),
        )
        return
    endpoint: str = request.getfixturevalue("fake_gcs_endpoint")
    bucket: str = request.getfixturevalue("gcs_bucket")
    store = GcsBlobStore(bucket, "cache/v1", endpoint=endpoint, retries=2, backoff=0.05)

    def plant(relative: str, data: bytes) -> None:
        put_object(endpoint, bucket, f"cache/v1/{relative}", data)

    signing: list[GcsBlobStore] = []

    def with_a_key() -> GcsBlobStore:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        credentials = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
            key_info(key),
            scopes=["https://www.googleapis.com/auth/devstorage.read_write"],
            always_use_jwt_access=True,  # self-signed tokens: the emulator is the only thing contacted
        )
        signing.append(GcsBlobStore(bucket, "cache/v1", endpoint=endpoint, credentials=credentials))
        return signing[-1]

    try:
        yield Backend(
            "gcs",
            store,
            ABILITIES_OF["gcs"],
            lambda: object_names(endpoint, bucket),
            plant,
            damage=lambda name: _damage_gcs_object(endpoint, bucket, name),
            signing=with_a_key,
        )
    finally:
        for opened in (store, *signing):
            opened.close()
