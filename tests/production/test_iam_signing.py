"""Signed URLs with a VM's attached service account: no key on disk, signatures from IAM's ``signBlob``.

The credentials are like a metadata server's (a token and an account, no key); a stand-in for the IAM
Credentials API signs with a key of its own, whose public half checks each URL the way GCS would, and the
fake-gcs-server emulator serves the download.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient
from google.auth import compute_engine
from google.auth.compute_engine import _metadata

from cache_server.app import create_app
from cache_server.errors import StorageUnavailable
from cache_server.settings import Settings
from cache_server.storage.gcs import GcsBlobStore, url_signing
from cache_server.storage.gcs.transport import SCOPES
from cache_server.wiring import Services, build_services
from tests.support.api import put_ok
from tests.support.gcs_keys import SIGNER, verify_v4
from tests.support.iam_signer import FakeIamSigner, FakeMetadataServer, MetadataCredentials
from tests.support.migrated import migrated
from tests.support.server import free_port
from tests.support.wait import wait_until

NS = "tpu-v5e-8"
EXPIRES = 120
TOKEN = "metadata-server-token"

Serve = Callable[[GcsBlobStore], tuple[TestClient, Services]]


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def iam(key: rsa.RSAPrivateKey) -> Iterator[FakeIamSigner]:
    with FakeIamSigner(key, token=TOKEN, accounts={SIGNER}) as stand_in:
        yield stand_in


def make_store(
    endpoint: str,
    bucket: str,
    iam_endpoint: str,
    credentials: MetadataCredentials | None = None,
    **options: object,
) -> GcsBlobStore:
    return GcsBlobStore(
        bucket,
        "cache",
        endpoint=endpoint,
        credentials=credentials or MetadataCredentials(TOKEN, SIGNER),
        iam_endpoint=iam_endpoint,
        retries=1,
        backoff=0.01,
        timeout=5.0,
        **options,  # type: ignore[arg-type]
    )


@pytest.fixture
def serve(tmp_path: Path, gcs_bucket: str) -> Iterator[Serve]:
    """A function that starts a signing server on a store; everything it started stops afterwards."""
    started: list[TestClient] = []

    def start(store: GcsBlobStore) -> tuple[TestClient, Services]:
        settings = Settings(
            data_dir=tmp_path / f"data{len(started)}",
            storage_url=f"gs://{gcs_bucket}/cache",
            signed_url_seconds=EXPIRES,
            access_flush_seconds=60.0,
        )
        migrated(settings)
        services = build_services(settings, store=store)
        client = TestClient(create_app(settings, services))
        client.__enter__()
        started.append(client)
        return client, services

    yield start
    for client in started:
        client.__exit__(None, None, None)


def test_urls_signed_through_iam_verify_and_download(
    serve: Serve, iam: FakeIamSigner, key: rsa.RSAPrivateKey, fake_gcs_endpoint: str, gcs_bucket: str
) -> None:
    client, _ = serve(make_store(fake_gcs_endpoint, gcs_bucket, iam.url))
    blobs = {str(2000 + i): os.urandom(5_000 + i) for i in range(20)}
    for name, data in blobs.items():
        put_ok(client, NS, name, data, created=True)

    response = client.post(f"/v1/namespaces/{NS}/urls", json={"keys": [*blobs, "404"]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["missing"] == ["404"] and sorted(body["urls"]) == sorted(blobs)
    with httpx.Client() as host:  # a host with no credentials at all
        for name, item in body["urls"].items():
            assert item["url"].startswith(f"{fake_gcs_endpoint}/{gcs_bucket}/cache/{NS}/{name}?")
            params = verify_v4(item["url"], key)  # signed by the key IAM holds, as GCS checks it
            assert params["X-Goog-Credential"].startswith(f"{SIGNER}/")
            assert params["X-Goog-Expires"] == str(EXPIRES)
            downloaded = host.get(item["url"])
            assert downloaded.status_code == 200 and downloaded.content == blobs[name]

    redirected = client.get(f"/v1/namespaces/{NS}/entries/2000?redirect=1", follow_redirects=False)
    assert redirected.status_code == 307
    verify_v4(redirected.headers["location"], key)
    assert httpx.get(redirected.headers["location"]).content == blobs["2000"]

    assert iam.calls == len(blobs) + 1  # one signBlob per URL, each with the VM's token
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in iam.requests)
    assert {r.path for r in iam.requests} == {f"/v1/projects/-/serviceAccounts/{SIGNER}:signBlob"}


def test_the_vms_default_account_is_named_by_refreshing_once(
    iam: FakeIamSigner, key: rsa.RSAPrivateKey, fake_gcs_endpoint: str, gcs_bucket: str
) -> None:
    credentials = MetadataCredentials(TOKEN, SIGNER, resolved=False)
    assert credentials.service_account_email == "default"
    store = make_store(fake_gcs_endpoint, gcs_bucket, iam.url, credentials)
    try:
        urls = store.signed_urls([f"{NS}/k{i}" for i in range(5)], 60)
        assert urls is not None and len(urls) == 5
        url = store.signed_url(f"{NS}/k9", 60)
        assert url is not None
        for signed in [*urls.values(), url]:
            assert verify_v4(signed, key)["X-Goog-Credential"].startswith(f"{SIGNER}/")
        assert credentials.refreshes == 1
    finally:
        store.close()


def test_a_vms_own_compute_engine_credentials_sign_through_iam(
    iam: FakeIamSigner,
    key: rsa.RSAPrivateKey,
    fake_gcs_endpoint: str,
    gcs_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeMetadataServer(SIGNER, TOKEN) as metadata:
        monkeypatch.setattr(
            _metadata, "_GCE_METADATA_HOST", metadata.host
        )  # GCE_METADATA_HOST, read at import
        credentials = compute_engine.Credentials(scopes=list(SCOPES))  # what google.auth.default() gives a VM
        store = GcsBlobStore(
            gcs_bucket,
            "cache",
            endpoint=fake_gcs_endpoint,
            credentials=credentials,
            iam_endpoint=iam.url,
            retries=1,
            backoff=0.01,
        )
        try:
            assert store.put(f"{NS}/vm", [b"from a VM"], {})
            url = store.signed_url(f"{NS}/vm", 60)
        finally:
            store.close()
    assert url is not None
    assert verify_v4(url, key)["X-Goog-Credential"].startswith(f"{SIGNER}/")
    assert httpx.get(url).content == b"from a VM"
    # The token that signs asks for a scope that reaches IAM (the store's own is storage-only).
    token_requests = [r for r in metadata.requests if r.path.endswith("/token")]
    assert any(url_signing.CLOUD_PLATFORM_SCOPE in r.query.get("scopes", "") for r in token_requests)


def test_an_explicit_account_is_signed_as(
    key: rsa.RSAPrivateKey, fake_gcs_endpoint: str, gcs_bucket: str
) -> None:
    other = "cache-urls@test-project.iam.gserviceaccount.com"
    with FakeIamSigner(key, token=TOKEN, accounts={other}) as iam:
        store = make_store(fake_gcs_endpoint, gcs_bucket, iam.url, signing_service_account=other)
        try:
            url = store.signed_url(f"{NS}/k", 60)
            assert url is not None
            assert verify_v4(url, key)["X-Goog-Credential"].startswith(f"{other}/")
        finally:
            store.close()


def test_a_batch_is_signed_concurrently_and_bounded(
    key: rsa.RSAPrivateKey, fake_gcs_endpoint: str, gcs_bucket: str
) -> None:
    names = [f"{NS}/{i:04d}" for i in range(200)]
    with FakeIamSigner(key, token=TOKEN, accounts={SIGNER}, latency=0.02) as iam:
        store = make_store(fake_gcs_endpoint, gcs_bucket, iam.url)
        try:
            started = time.perf_counter()
            urls = store.signed_urls([*names, names[0]], 60)
            elapsed = time.perf_counter() - started
        finally:
            store.close()
    assert urls is not None and sorted(urls) == names
    assert iam.calls == len(names)
    assert 2 <= iam.max_in_flight <= url_signing.SIGNING_CONCURRENCY
    assert elapsed < len(names) * iam.latency * 0.75  # one after another: 4 s at least
    for url in list(urls.values())[::50]:
        verify_v4(url, key)


def test_refused_signing_is_logged_and_the_server_streams(
    serve: Serve,
    iam: FakeIamSigner,
    key: rsa.RSAPrivateKey,
    fake_gcs_endpoint: str,
    gcs_bucket: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(url_signing, "REFUSAL_PAUSE_SECONDS", 0.3)
    client, _ = serve(make_store(fake_gcs_endpoint, gcs_bucket, iam.url))
    put_ok(client, NS, "7", b"seven", created=True)
    iam.refusing = True  # the account lacks roles/iam.serviceAccountTokenCreator on itself

    with caplog.at_level(logging.ERROR, logger=url_signing.__name__):
        answer = client.post(f"/v1/namespaces/{NS}/urls", json={"keys": ["7"]})
        assert answer.status_code == 501 and answer.json()["error"] == "signed_urls_unavailable"
        streamed = client.get(f"/v1/namespaces/{NS}/entries/7?redirect=1", follow_redirects=False)
        assert streamed.status_code == 200 and streamed.content == b"seven"
    refusals = [r for r in iam.requests if r.path.endswith(":signBlob")]
    assert len(refusals) == 1  # during the pause nothing more is asked
    [record] = [r for r in caplog.records if r.name == url_signing.__name__]
    assert SIGNER in record.getMessage()
    assert "roles/iam.serviceAccountTokenCreator" in record.getMessage()
    assert "HTTP 403" in record.getMessage() and "iam.serviceAccounts.signBlob" in record.getMessage()

    iam.refusing = False  # the role is granted: after the pause, URLs again
    redirected = wait_until(
        lambda: (
            (r := client.get(f"/v1/namespaces/{NS}/entries/7?redirect=1", follow_redirects=False)).status_code
            == 307
            and r
        ),
        timeout=5,
    )
    verify_v4(redirected.headers["location"], key)


def test_a_token_iam_does_not_accept_is_a_refusal_too(
    key: rsa.RSAPrivateKey, fake_gcs_endpoint: str, gcs_bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeIamSigner(key, token="another-token", accounts={SIGNER}) as iam:
        store = make_store(fake_gcs_endpoint, gcs_bucket, iam.url)
        try:
            with caplog.at_level(logging.ERROR, logger=url_signing.__name__):
                assert store.signed_urls([f"{NS}/a", f"{NS}/b", f"{NS}/c"], 60) is None
                assert store.signed_url(f"{NS}/a", 60) is None
        finally:
            store.close()
    [record] = [r for r in caplog.records if r.name == url_signing.__name__]
    assert "HTTP 401" in record.getMessage()


def test_iam_that_is_down_is_storage_unavailable(
    serve: Serve, fake_gcs_endpoint: str, gcs_bucket: str
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    store = make_store(fake_gcs_endpoint, gcs_bucket, down)
    with pytest.raises(StorageUnavailable, match=r"IAM Credentials API .* still failed after 2 attempts"):
        store.signed_url(f"{NS}/k", 60)
    with pytest.raises(StorageUnavailable, match="IAM Credentials API"):
        store.signed_urls([f"{NS}/k", f"{NS}/l"], 60)

    client, _ = serve(store)
    put_ok(client, NS, "7", b"seven", created=True)
    answer = client.post(f"/v1/namespaces/{NS}/urls", json={"keys": ["7"]})
    assert answer.status_code == 503 and answer.json()["error"] == "storage_unavailable"
    redirected = client.get(f"/v1/namespaces/{NS}/entries/7?redirect=1", follow_redirects=False)
    assert redirected.status_code == 503
    assert client.get(f"/v1/namespaces/{NS}/entries/7").content == b"seven"  # streaming is unaffected


def test_iam_overloaded_is_retried(
    iam: FakeIamSigner, key: rsa.RSAPrivateKey, fake_gcs_endpoint: str, gcs_bucket: str
) -> None:
    iam.outages = 1
    store = make_store(fake_gcs_endpoint, gcs_bucket, iam.url)
    try:
        url = store.signed_url(f"{NS}/k", 60)
    finally:
        store.close()
    assert url is not None
    verify_v4(url, key)
    assert len(iam.requests) == 2 and iam.calls == 1
