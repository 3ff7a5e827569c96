"""Signed URLs on the GCS emulator: the server hands them out, hosts download the bytes from the bucket.

The signing key is a throwaway service-account key made here; its signature is checked the way GCS
checks it (the emulator itself does not check signatures).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient
from google.oauth2 import service_account

from cache_protocol import SHA256_HEADER
from cache_server.app import create_app
from cache_server.settings import Settings
from cache_server.storage.gcs import GcsBlobStore
from cache_server.wiring import Services, build_services
from tests.support.api import put_ok, sha
from tests.support.gcs_keys import key_info, verify_v4
from tests.support.migrated import migrated

NS = "tpu-v5e-8"
EXPIRES = 120


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def gcs_service(
    tmp_path: Path, endpoint: str, bucket: str, credentials: service_account.Credentials | None, seconds: int
) -> Services:
    settings = Settings(
        data_dir=tmp_path / "data",
        storage_url=f"gs://{bucket}/cache",
        signed_url_seconds=seconds,
        access_flush_seconds=60.0,
    )
    migrated(settings)
    store = GcsBlobStore(bucket, "cache", endpoint=endpoint, credentials=credentials)
    return build_services(settings, store=store)


@pytest.fixture
def signing(
    tmp_path: Path, fake_gcs_endpoint: str, gcs_bucket: str, key: rsa.RSAPrivateKey
) -> Iterator[tuple[TestClient, Services]]:
    credentials = service_account.Credentials.from_service_account_info(
        key_info(key),
        scopes=["https://www.googleapis.com/auth/devstorage.read_write"],
        always_use_jwt_access=True,  # self-signed tokens: nothing but the emulator is contacted
    )
    services = gcs_service(tmp_path, fake_gcs_endpoint, gcs_bucket, credentials, EXPIRES)
    with TestClient(create_app(services.settings, services)) as client:
        yield client, services


def counters(services: Services) -> tuple[int, int]:
    services.access.flush()
    found = services.cache.get_namespace(NS)
    return found.counters.hits, found.counters.misses


def test_entry_get_redirects_to_a_signed_url_on_request(
    signing: tuple[TestClient, Services], fake_gcs_endpoint: str, gcs_bucket: str, key: rsa.RSAPrivateKey
) -> None:
    client, service = signing
    data = os.urandom(300_000)
    put_ok(client, NS, "4242", data, created=True)

    redirected = client.get(f"/v1/namespaces/{NS}/entries/4242?redirect=1", follow_redirects=False)
    assert redirected.status_code == 307
    location = redirected.headers["location"]
    assert location.startswith(f"{fake_gcs_endpoint}/{gcs_bucket}/cache/{NS}/4242?")
    assert redirected.headers[SHA256_HEADER] == sha(data)
    assert redirected.headers["x-content-length"] == str(len(data))
    assert redirected.headers["cache-control"] == "no-store"
    params = verify_v4(location, key)
    assert params["X-Goog-Expires"] == str(EXPIRES)

    direct = httpx.get(location)  # a host with no credentials at all
    assert direct.status_code == 200 and direct.content == data

    streamed = client.get(f"/v1/namespaces/{NS}/entries/4242")  # the default is unchanged
    assert streamed.status_code == 200 and streamed.content == data
    miss = client.get(f"/v1/namespaces/{NS}/entries/9999?redirect=1", follow_redirects=False)
    assert miss.status_code == 404 and miss.json()["error"] == "entry_not_found"
    assert counters(service) == (2, 1)


def test_urls_for_a_whole_manifest(signing: tuple[TestClient, Services], key: rsa.RSAPrivateKey) -> None:
    client, service = signing
    blobs = {str(1000 + i): os.urandom(10_000 + i) for i in range(25)}
    for name, data in blobs.items():
        put_ok(client, NS, name, data, created=True)
    keys = [entry["key"] for entry in client.get(f"/v1/namespaces/{NS}/manifest").json()["entries"]]
    assert sorted(keys) == sorted(blobs)

    response = client.post(f"/v1/namespaces/{NS}/urls", json={"keys": [*keys, "404", keys[0], "405"]})
    assert response.status_code == 200
    body = response.json()
    assert body["expires_in"] == EXPIRES
    assert body["missing"] == ["404", "405"]
    assert sorted(body["urls"]) == sorted(blobs)
    with httpx.Client() as host:
        for name, item in body["urls"].items():
            assert (item["size"], item["sha256"]) == (len(blobs[name]), sha(blobs[name]))
            downloaded = host.get(item["url"])
            assert downloaded.status_code == 200
            assert sha(downloaded.content) == item["sha256"]
    verify_v4(body["urls"][keys[0]]["url"], key)
    assert counters(service) == (25, 2)

    too_many = client.post(f"/v1/namespaces/{NS}/urls", json={"keys": ["k"] * 10_001})
    assert too_many.status_code == 400 and too_many.json()["error"] == "too_many_keys"


def test_servers_that_do_not_sign_say_so_and_stream(
    client: TestClient, tmp_path: Path, fake_gcs_endpoint: str, gcs_bucket: str
) -> None:
    # The default (local store, signed URLs off), and GCS credentials that cannot sign (anonymous).
    unsigned = gcs_service(tmp_path / "anon", fake_gcs_endpoint, gcs_bucket, None, EXPIRES)
    with TestClient(create_app(unsigned.settings, unsigned)) as anonymous:
        for server in (client, anonymous):
            put_ok(server, NS, "7", b"seven", created=True)
            answer = server.post(f"/v1/namespaces/{NS}/urls", json={"keys": ["7"]})
            assert answer.status_code == 501
            assert answer.json()["error"] == "signed_urls_unavailable"
            assert "POST .../bundle" in answer.json()["detail"]
            streamed = server.get(f"/v1/namespaces/{NS}/entries/7?redirect=1", follow_redirects=False)
            assert streamed.status_code == 200 and streamed.content == b"seven"
