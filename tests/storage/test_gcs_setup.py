"""GCS store set-up: URLs, prefixes, credentials, the emulator variable, signed URLs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import rsa
from google.oauth2 import service_account

from cache_server.errors import StorageUnavailable
from cache_server.storage import open_store
from cache_server.storage.gcs import MAX_SIGNED_URL_SECONDS, GcsBlobStore
from tests.support.gcs_emulator import object_names
from tests.support.gcs_keys import SIGNER, key_info, verify_v4


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def test_signed_url_downloads_the_blob_and_is_signed_by_the_key(
    fake_gcs_endpoint: str, gcs_bucket: str, key: rsa.RSAPrivateKey
) -> None:
    credentials = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
        key_info(key),
        scopes=["https://www.googleapis.com/auth/devstorage.read_write"],
        always_use_jwt_access=True,  # self-signed tokens: the emulator is the only thing contacted
    )
    store = GcsBlobStore(gcs_bucket, "signed", endpoint=fake_gcs_endpoint, credentials=credentials)
    data = b"compiled executable " * 1000
    assert store.put("ns/key.1", [data], {}) is True

    url = store.signed_url("ns/key.1", 300)
    assert url is not None
    assert url.startswith(f"{fake_gcs_endpoint}/{gcs_bucket}/signed/ns/key.1?")
    response = httpx.get(url)
    assert response.status_code == 200
    assert response.content == data

    params = verify_v4(url, key)
    assert params["X-Goog-Algorithm"] == "GOOG4-RSA-SHA256"
    assert params["X-Goog-Expires"] == "300"
    assert params["X-Goog-Credential"].startswith(f"{SIGNER}/")
    with pytest.raises(InvalidSignature):
        verify_v4(url.replace("/ns/key.1?", "/ns/key.2?"), key)
    with pytest.raises(InvalidSignature):
        verify_v4(url.replace("X-Goog-Expires=300", "X-Goog-Expires=604800"), key)
    store.close()


def test_signed_url_is_none_when_the_credentials_cannot_sign(fake_gcs_endpoint: str, gcs_bucket: str) -> None:
    store = GcsBlobStore(gcs_bucket, endpoint=fake_gcs_endpoint)  # anonymous, as with any emulator
    assert store.put("ns/k", [b"x"], {}) is True
    assert store.signed_url("ns/k", 60) is None
    store.close()


def test_application_default_credentials_from_a_key_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: rsa.RSAPrivateKey
) -> None:
    key_file = tmp_path / "key.json"
    key_file.write_text(json.dumps(key_info(key)))
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))

    store = open_store("gs://prod-bucket/cache/v1", timeout=5, retries=1)  # nothing is contacted yet
    assert isinstance(store, GcsBlobStore)
    url = store.signed_url("ns/key.1", MAX_SIGNED_URL_SECONDS)
    assert url is not None
    assert urlsplit(url).scheme == "https"
    assert urlsplit(url).path == "/prod-bucket/cache/v1/ns/key.1"
    assert verify_v4(url, key)["X-Goog-Expires"] == str(MAX_SIGNED_URL_SECONDS)
    for bad in (0, -5, MAX_SIGNED_URL_SECONDS + 1):
        with pytest.raises(ValueError):
            store.signed_url("ns/key.1", bad)
    store.close()


def test_missing_credentials_are_reported_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(StorageUnavailable, match=r"'prod-bucket'.*GOOGLE_APPLICATION_CREDENTIALS"):
        GcsBlobStore.from_url("gs://prod-bucket/cache")


def test_open_store_follows_the_emulator_variable(
    fake_gcs_endpoint: str, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs_endpoint.removeprefix("http://"))
    store = open_store(f"gs://{gcs_bucket}/team/cache/", timeout=5, retries=1)
    assert isinstance(store, GcsBlobStore)
    assert (store.bucket_name, store.prefix) == (gcs_bucket, "team/cache")
    assert store.put("ns/k", [b"payload"], {"a": "1"}) is True
    assert object_names(fake_gcs_endpoint, gcs_bucket) == ["team/cache/ns/k"]
    store.close()


def test_prefixes_keep_stores_apart(fake_gcs_endpoint: str, gcs_bucket: str) -> None:
    def store(prefix: str) -> GcsBlobStore:
        return GcsBlobStore(gcs_bucket, prefix, endpoint=fake_gcs_endpoint)

    team_a, team_b, whole_bucket = store("team-a"), store("team-b"), store("")
    assert team_a.put("ns/k", [b"a"], {}) is True
    assert team_b.put("ns/k", [b"b"], {}) is True
    assert whole_bucket.put("ns/k", [b"root"], {}) is True
    nested = GcsBlobStore(gcs_bucket, "team-a/deeper", endpoint=fake_gcs_endpoint)
    assert nested.put("ns/k", [b"deep"], {}) is True

    def read(s: GcsBlobStore) -> bytes:
        reader = s.open("ns/k")
        assert reader is not None
        with reader:
            return b"".join(reader.chunks())

    assert [read(s) for s in (team_a, team_b, whole_bucket, nested)] == [b"a", b"b", b"root", b"deep"]
    # Objects of other prefixes, or not shaped <namespace>/<key>, are not blobs of this store.
    assert [i.name for i in team_a.list()] == ["ns/k"]
    assert [i.name for i in whole_bucket.list()] == ["ns/k"]
    assert team_a.delete("ns/k") is True
    assert read(team_b) == b"b" and read(nested) == b"deep"
    for s in (team_a, team_b, whole_bucket, nested):
        s.close()


@pytest.mark.parametrize("url", ["gs://", "gs:///prefix", "s3://bucket/prefix", "bucket/prefix"])
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        open_store(url)


@pytest.mark.parametrize("kwargs", [{"chunk_size": 1000}, {"chunk_size": 0}, {"retries": -1}])
def test_bad_settings_are_refused(fake_gcs_endpoint: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        GcsBlobStore("bucket", endpoint=fake_gcs_endpoint, **kwargs)
