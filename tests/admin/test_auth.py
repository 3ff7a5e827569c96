"""Auth on: every route against no token, a bad one, a revoked one, and each role."""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any

import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient

from cache_protocol import SHA256_HEADER
from cache_server.api.auth import OPEN_ROUTES, ROUTE_ROLES
from cache_server.settings import Settings
from tests.support.api import bearer, sha

ORDER = ["read", "write", "admin"]
ENTRY = b"compiled executable bytes"


# (method, path, request kwargs, role needed, statuses that mean "done")
ROUTES: list[tuple[str, str, dict[str, Any], str, set[int]]] = [
    ("PUT", "/v1/namespaces/ns", {"json": {"labels": {"a": "b"}}}, "write", {200}),
    ("GET", "/v1/namespaces/ns", {}, "read", {200}),
    (
        "PUT",
        "/v1/namespaces/ns/entries/new",
        {"content": b"new", "headers": {SHA256_HEADER: sha(b"new")}},
        "write",
        {200, 201},
    ),
    ("GET", "/v1/namespaces/ns/entries/k", {}, "read", {200}),
    ("HEAD", "/v1/namespaces/ns/entries/k", {}, "read", {200}),
    ("DELETE", "/v1/namespaces/ns/entries/k", {}, "admin", {204}),
    ("POST", "/v1/namespaces/ns/missing", {"json": {"keys": ["k", "x"]}}, "read", {200}),
    ("GET", "/v1/namespaces/ns/manifest", {}, "read", {200}),
    ("POST", "/v1/namespaces/ns/bundle", {"json": {"keys": ["k"]}}, "read", {200}),
    ("GET", "/v1/namespaces/ns/nearest", {}, "read", {200}),
    ("POST", "/v1/namespaces/ns/nearest", {"json": {"fingerprint": {"framework": "jax"}}}, "read", {200}),
    ("GET", "/admin/stats", {}, "admin", {200}),
    ("POST", "/admin/evict", {"json": {"max_total_bytes": 10**12}}, "admin", {200}),
    ("POST", "/admin/gc", {"json": {}}, "admin", {200}),
    ("POST", "/admin/pack", {"json": {}}, "admin", {501}),  # a local store packs only when told to
    ("DELETE", "/admin/namespaces/spare", {}, "admin", {200}),
    ("GET", "/admin/tokens", {}, "admin", {200}),
    ("POST", "/admin/tokens/nobody/purge", {"json": {"dry_run": True}}, "admin", {404}),
    ("GET", "/", {}, "read", {200}),
    ("GET", "/dashboard/data", {}, "read", {200}),
    ("GET", "/dashboard/namespaces/ns", {}, "read", {200}),
]


@pytest.fixture
def stocked(auth_client: TestClient, tokens: dict[str, str]) -> TestClient:
    for namespace in ("ns", "spare"):
        response = auth_client.put(
            f"/v1/namespaces/{namespace}/entries/k",
            content=ENTRY,
            headers={SHA256_HEADER: sha(ENTRY), **bearer(tokens["write"])},
        )
        assert response.status_code == 201
    return auth_client


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "needed", "done"), ROUTES, ids=[f"{r[0]} {r[1]}" for r in ROUTES]
)
def test_each_route_against_each_principal(
    stocked: TestClient,
    tokens: dict[str, str],
    method: str,
    path: str,
    kwargs: dict[str, Any],
    needed: str,
    done: set[int],
) -> None:
    def call(headers: dict[str, str]) -> int:
        extra = {**kwargs.get("headers", {}), **headers}
        response = stocked.request(method, path, **{**kwargs, "headers": extra})
        return response.status_code

    assert call({}) == 401
    assert call(bearer("xlc_000000000000_" + "A" * 43)) == 401
    assert call(bearer("not-even-a-token")) == 401
    assert call(bearer(tokens["revoked"])) == 401
    for role in ORDER:  # weakest first: a destructive route succeeds only at the end
        expected = done if ORDER.index(role) >= ORDER.index(needed) else {403}
        assert call(bearer(tokens[role])) in expected, f"{role} on {method} {path}"


def test_open_routes_need_no_token(auth_client: TestClient) -> None:
    for path in ("/healthz", "/readyz", "/static/dashboard.js", "/static/dashboard.css"):
        assert auth_client.get(path).status_code == 200, path


def test_metrics_and_api_docs_need_a_token(auth_client: TestClient, tokens: dict[str, str]) -> None:
    """/metrics names every namespace and the API document describes every route: not for anyone."""
    for path in ("/metrics", "/openapi.json", "/docs"):
        assert auth_client.get(path).status_code == 401, path
        assert auth_client.get(path, headers=bearer(tokens["read"])).status_code == 200, path
    document = auth_client.get("/openapi.json", headers=bearer(tokens["read"])).json()
    assert "/v1/namespaces/{namespace}/entries/{key}" in document["paths"]
    assert "/openapi.json" not in document["paths"]


def test_every_route_has_a_role_or_is_open(auth_client: TestClient) -> None:
    """A new route must be given its role in cache_server/api/auth.py (unlisted routes need admin)."""
    routes = [
        (method, route.path)
        for route in iter_route_contexts(auth_client.app.routes)  # type: ignore[attr-defined]
        if isinstance(route.original_route, APIRoute)
        for method in route.methods or ()
    ]
    assert len(routes) >= len(ROUTE_ROLES)  # every route of the app is seen (included routers too)
    unlisted = [
        (method, path)
        for method, path in routes
        if path not in OPEN_ROUTES and (method, path) not in ROUTE_ROLES
    ]
    assert unlisted == []


def test_error_bodies_say_what_to_do(auth_client: TestClient, tokens: dict[str, str]) -> None:
    missing = auth_client.get("/v1/namespaces/ns")
    assert missing.json()["error"] == "unauthorized"
    assert "Authorization: Bearer" in missing.json()["detail"]
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    revoked = auth_client.get("/v1/namespaces/ns", headers=bearer(tokens["revoked"]))
    assert "revoked" in revoked.json()["detail"]
    weak = auth_client.post("/admin/gc", headers=bearer(tokens["write"]))
    assert weak.status_code == 403
    assert weak.json() == {
        "error": "forbidden",
        "detail": "The token 'user-write' has the write role; POST /admin/gc needs the admin role.",
    }


def test_tokens_are_stored_hashed(
    auth_client: TestClient, auth_settings: Settings, tokens: dict[str, str]
) -> None:
    assert auth_client.get("/v1/namespaces/ns", headers=bearer(tokens["read"])).status_code in (200, 404)
    database = auth_settings.data_dir / "index.sqlite3"
    with sqlite3.connect(database) as conn:
        rows = dict(conn.execute("SELECT name, token_sha256 FROM api_tokens").fetchall())
        used = conn.execute("SELECT last_used_at FROM api_tokens WHERE name = 'user-read'").fetchone()[0]
    assert rows["user-read"] == hashlib.sha256(tokens["read"].encode()).hexdigest()
    assert used is not None
    stored = b"".join(p.read_bytes() for p in database.parent.glob("index.sqlite3*"))
    for token in tokens.values():
        secret = token.split("_", 2)[2]  # xlc_<id>_<secret>; the secret may itself contain "_"
        assert secret.encode() not in stored


def test_dashboard_token_link_sets_a_cookie_only_the_dashboard_accepts(
    auth_client: TestClient, tokens: dict[str, str]
) -> None:
    assert auth_client.get("/").status_code == 401
    assert auth_client.get("/", params={"token": "xlc_bad"}, follow_redirects=False).status_code == 401
    link = auth_client.get("/", params={"token": tokens["read"]}, follow_redirects=False)
    assert link.status_code == 303 and link.headers["location"] == "/"
    cookie = link.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    assert auth_client.get("/").status_code == 200  # the cookie now stands for the token
    assert auth_client.get("/dashboard/data").json()["totals"]["entries"] == 0
    assert auth_client.get("/v1/namespaces/ns").status_code == 401  # the API never takes the cookie
    assert auth_client.get("/admin/stats").status_code == 401
