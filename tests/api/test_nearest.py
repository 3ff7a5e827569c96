"""``/v1/namespaces/{ns}/nearest`` and the dashboard's namespace data: answers, hostile input, scopes."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from cache_protocol import SHA256_HEADER
from cache_server.auth.tokens import Role
from tests.support.api import bearer, sha
from tests.support.apps import client_for, services_of

FP: dict[str, Any] = {
    "schema": 1,
    "framework": "jax",
    "jax_version": "0.10.2",
    "platform": "cpu",
    "xla_flags_digest": None,
    "xla_flags": {},
}
FAST = {**FP, "xla_flags_digest": "f" * 64, "xla_flags": {"--xla_cpu_enable_fast_math": "true"}}


def _stock(client: TestClient, namespace: str, fp: dict[str, Any], keys: int, **headers: str) -> None:
    assert client.put(f"/v1/namespaces/{namespace}", json={"fingerprint": fp}, headers=headers).is_success
    for i in range(keys):
        data = f"{namespace}-{i}".encode()
        path = f"/v1/namespaces/{namespace}/entries/k{i}"
        put = client.put(path, content=data, headers={SHA256_HEADER: sha(data), **headers})
        assert put.status_code == 201


def test_nearest_names_the_flag_that_differs(client: TestClient) -> None:
    _stock(client, "jax-plain", FP, 2)
    _stock(client, "jax-fast", FAST, 0)
    body = client.get("/v1/namespaces/jax-fast/nearest").json()
    assert body["namespace"] == "jax-fast" and body["entries"] == 0
    [near] = body["nearest"]
    assert (near["namespace"], near["entries"], near["differing_fields"]) == ("jax-plain", 2, 1)
    assert near["last_used_at"]
    assert near["differences"] == [
        {
            "field": "XLA_FLAGS",
            "ours": "--xla_cpu_enable_fast_math=true",
            "theirs": None,
            "text": "--xla_cpu_enable_fast_math=true (theirs: unset)",
        }
    ]
    # POST: a fingerprint of a namespace never registered; nothing is stored
    posted = client.post("/v1/namespaces/jax-new/nearest", json={"fingerprint": {**FP, "platform": "tpu"}})
    assert posted.status_code == 200
    assert [d["text"] for d in posted.json()["nearest"][0]["differences"]] == ["tpu (theirs: cpu)"]
    assert client.get("/v1/namespaces/jax-new").status_code == 404
    assert client.get("/v1/namespaces/jax-new/nearest").status_code == 404

    page = client.get("/dashboard/namespaces/jax-plain").json()
    assert page["namespace"]["fingerprint"] == FP and page["namespace"]["entries"] == 2
    assert sorted(e["key"] for e in page["entries"]) == ["k0", "k1"]
    assert page["nearest"]["nearest"] == []  # jax-fast stores nothing: never named


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("GET", "/v1/namespaces/..%2Fetc/nearest", {}),
        ("GET", "/v1/namespaces/bad%20name/nearest", {}),
        ("GET", "/v1/namespaces/" + "a" * 129 + "/nearest", {}),
        ("GET", "/v1/namespaces/.hidden/nearest", {}),
        ("POST", "/v1/namespaces/a%00b/nearest", {"json": {"fingerprint": FP}}),
        ("GET", "/dashboard/namespaces/bad%20name", {}),
        ("GET", "/v1/namespaces/jax-plain/nearest?limit=0", {}),
        ("GET", "/v1/namespaces/jax-plain/nearest?limit=100000", {}),
        ("POST", "/v1/namespaces/jax-plain/nearest", {"json": {"fingerprint": "not an object"}}),
        ("POST", "/v1/namespaces/jax-plain/nearest", {"json": {}}),
        ("POST", "/v1/namespaces/jax-plain/nearest", {"json": {"fingerprint": {"x": "y" * 70_000}}}),
    ],
)
def test_hostile_requests_get_4xx(client: TestClient, method: str, path: str, kwargs: dict[str, Any]) -> None:
    _stock(client, "jax-plain", FP, 1)
    response = client.request(method, path, **kwargs)
    assert 400 <= response.status_code < 500, response.text
    assert client.get("/v1/namespaces/jax-plain").json()["entries"] == 1  # nothing changed


def test_deep_fingerprint_is_refused(client: TestClient) -> None:
    deep: dict[str, Any] = {}
    for _ in range(12):
        deep = {"a": deep}
    response = client.post("/v1/namespaces/x/nearest", json={"fingerprint": deep})
    assert response.status_code == 400


def test_scoped_token_learns_only_namespaces_it_may_read(tmp_path: Any) -> None:
    with client_for(tmp_path, auth=True) as client:
        tokens = services_of(client).tokens
        writer = tokens.create("writer", Role.WRITE)[0]
        scoped = tokens.create("team-a", Role.READ, namespaces=["team-a-*"])[0]
        _stock(client, "team-a-fast", FAST, 0, **bearer(writer))
        _stock(client, "team-a-plain", {**FP, "jax_version": "0.10.1"}, 1, **bearer(writer))
        _stock(client, "team-b-plain", FP, 3, **bearer(writer))  # nearer, but out of the token's reach
        everything = client.get("/v1/namespaces/team-a-fast/nearest", headers=bearer(writer)).json()
        assert [n["namespace"] for n in everything["nearest"]] == ["team-b-plain", "team-a-plain"]
        mine = client.get("/v1/namespaces/team-a-fast/nearest", headers=bearer(scoped)).json()
        assert [n["namespace"] for n in mine["nearest"]] == ["team-a-plain"]
        posted = client.post(
            "/v1/namespaces/team-a-x/nearest", json={"fingerprint": FP}, headers=bearer(scoped)
        ).json()
        assert [n["namespace"] for n in posted["nearest"]] == ["team-a-plain"]
        for path in ("/v1/namespaces/team-b-plain/nearest", "/dashboard/namespaces/team-b-plain"):
            refused = client.get(path, headers=bearer(scoped))
            assert refused.status_code == 403, path
        page = client.get("/dashboard/namespaces/team-a-fast", headers=bearer(scoped)).json()
        assert [n["namespace"] for n in page["nearest"]["nearest"]] == ["team-a-plain"]
