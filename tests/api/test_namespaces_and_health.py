"""Namespaces, health and readiness, in process."""

from __future__ import annotations

import shutil

from fastapi.testclient import TestClient

from cache_protocol import SHA256_HEADER
from cache_server.settings import Settings
from tests.support.api import sha

FP = {"framework": "torch_xla", "torch_xla": "2.7.0", "device_type": "CPU", "devices": 4}


def test_register_then_update_namespace(client: TestClient) -> None:
    created = client.put("/v1/namespaces/ns1", json={"fingerprint": FP, "labels": {"team": "vision"}})
    assert created.status_code == 201
    body = created.json()
    assert body["fingerprint"] == FP
    assert body["labels"] == {"team": "vision"}
    assert body["entries"] == 0 and body["bytes"] == 0
    updated = client.put("/v1/namespaces/ns1", json={"fingerprint": FP, "labels": {"team": "text"}})
    assert updated.status_code == 200
    assert updated.json()["labels"] == {"team": "text"}
    assert updated.json()["created_at"] == body["created_at"]


def test_get_namespace_counts_entries_and_bytes(client: TestClient) -> None:
    client.put("/v1/namespaces/ns1", json={"fingerprint": FP})
    for key, data in [("a", b"12345"), ("b", b"678")]:
        client.put(f"/v1/namespaces/ns1/entries/{key}", content=data, headers={SHA256_HEADER: sha(data)})
    body = client.get("/v1/namespaces/ns1").json()
    assert (body["entries"], body["bytes"], body["uploads"]) == (2, 8, 2)
    assert body["fingerprint"] == FP


def test_unknown_namespace_is_404(client: TestClient) -> None:
    response = client.get("/v1/namespaces/never")
    assert response.status_code == 404
    assert response.json()["error"] == "namespace_not_found"


def test_upload_to_unregistered_namespace_creates_it(client: TestClient) -> None:
    assert (
        client.put(
            "/v1/namespaces/fresh/entries/k", content=b"x", headers={SHA256_HEADER: sha(b"x")}
        ).status_code
        == 201
    )
    body = client.get("/v1/namespaces/fresh").json()
    assert body["entries"] == 1 and body["fingerprint"] == {}


def test_namespace_body_must_be_json_object(client: TestClient) -> None:
    bad = client.put("/v1/namespaces/ns1", content=b"[1,2", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400
    assert bad.json()["detail"] == "The request body is not valid JSON."
    wrong = client.put("/v1/namespaces/ns1", json={"fingerprint": "not an object"})
    assert wrong.status_code == 400
    assert "fingerprint" in wrong.json()["detail"]
    assert client.get("/v1/namespaces/ns1").status_code == 404


def test_health_and_readiness(client: TestClient, settings: Settings) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    store_root = settings.data_dir / "blobs"
    shutil.rmtree(store_root)
    not_ready = client.get("/readyz")
    assert not_ready.status_code == 503
    assert not_ready.json()["error"] == "storage_unavailable"
    upload = client.put("/v1/namespaces/ns1/entries/k", content=b"x", headers={SHA256_HEADER: sha(b"x")})
    assert upload.status_code == 503
    assert upload.json()["error"] == "storage_unavailable"
    assert client.get("/healthz").status_code == 200


def test_labels_a_terminal_would_obey_are_refused_and_the_namespace_keeps_its_own(client: TestClient) -> None:
    """Labels are text for people (the dashboard, ``xla-cache``): the third probe's U+009B, ESC, a bidi
    override or a line separator in a name or a value is a 400 naming it; what was registered stays."""
    assert client.put("/v1/namespaces/ns1", json={"fingerprint": FP, "labels": {"team": "vision"}}).is_success
    for labels in ({"team": "x\u009b2J"}, {"te\x1bam": "v"}, {"team": "admin\u202egnp"}, {"t": "a\u2028b"}):
        response = client.put("/v1/namespaces/ns1", json={"fingerprint": FP, "labels": labels})
        assert response.status_code == 400 and "U+" in response.text, (labels, response.text)
    assert client.get("/v1/namespaces/ns1").json()["labels"] == {"team": "vision"}
