"""Auth on: every route against no token, a bad one, a revoked one, and each role."""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

from cache_protocol import SHA256_HEADER
from cache_server.api.access import CLOSED, Access, Scope, access_of, declared
from cache_server.auth.tokens import Role
from cache_server.settings import Settings
from tests.support.api import bearer, sha
from tests.support.apps import services_of

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
    ("GET", "/dashboard/me", {}, "read", {200}),
    ("GET", "/dashboard/data", {}, "read", {200}),
    ("GET", "/dashboard/runs", {}, "read", {200}),
    ("GET", "/dashboard/graphs", {"params": {"namespace": "ns"}}, "read", {200}),
    ("GET", "/admin/graphs", {"params": {"namespace": "ns"}}, "read", {200}),
    ("GET", "/admin/graphs/variants", {"params": {"namespace": "ns"}}, "read", {200}),
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
    for path in ("/healthz", "/readyz", "/static/dashboard.js", "/static/dashboard.css", "/", "/docs"):
        assert auth_client.get(path).status_code == 200, path


def test_metrics_and_api_docs_need_a_token(auth_client: TestClient, tokens: dict[str, str]) -> None:
    """/metrics names every namespace and the API document describes every route: not for anyone (the
    page at /docs that shows the document is open, as the dashboard's is: its script sends the token)."""
    for path in ("/metrics", "/openapi.json"):
        assert auth_client.get(path).status_code == 401, path
        assert auth_client.get(path, headers=bearer(tokens["read"])).status_code == 200, path
    document = auth_client.get("/openapi.json", headers=bearer(tokens["read"])).json()
    assert "/v1/namespaces/{namespace}/entries/{key}" in document["paths"]
    assert "/openapi.json" not in document["paths"]


# What each route declared before the declarations moved beside the routes (the old tables of
# cache_server/api/auth.py): role ("open" for none), then the scope rule for a namespace-limited token.
_NS = "/v1/namespaces/{namespace}"
_P, _Q, _R, _N, _E = "path", "query", "route", "none", "every"
EXPECTED_ACCESS: dict[tuple[str, str], tuple[str, str]] = {
    ("PUT", _NS): ("write", _P),
    ("GET", _NS): ("read", _P),
    ("PUT", f"{_NS}/entries/{{key:path}}"): ("write", _P),
    ("POST", f"{_NS}/entries"): ("write", _P),
    ("GET", f"{_NS}/feed"): ("read", _P),
    ("GET", f"{_NS}/entries/{{key:path}}"): ("read", _P),
    ("HEAD", f"{_NS}/entries/{{key:path}}"): ("read", _P),
    ("DELETE", f"{_NS}/entries/{{key:path}}"): ("admin", _P),
    ("POST", f"{_NS}/missing"): ("read", _P),
    ("GET", f"{_NS}/manifest"): ("read", _P),
    ("POST", f"{_NS}/bundle"): ("read", _P),
    ("POST", f"{_NS}/urls"): ("read", _P),
    ("GET", f"{_NS}/nearest"): ("read", _P),
    ("POST", f"{_NS}/nearest"): ("read", _P),
    ("GET", "/admin/stats"): ("admin", _E),
    ("POST", "/admin/evict"): ("admin", _E),
    ("POST", "/admin/gc"): ("admin", _E),
    ("POST", "/admin/pack"): ("admin", _E),
    ("DELETE", "/admin/namespaces/{namespace}"): ("admin", _E),
    ("GET", "/admin/tokens"): ("admin", _E),
    ("GET", "/admin/graphs"): ("read", _Q),
    ("GET", "/admin/graphs/variants"): ("read", _Q),
    ("POST", "/admin/tokens/{token}/purge"): ("admin", _E),
    ("PUT", "/admin/tokens/{token}/metrics"): ("admin", _E),
    ("GET", "/admin/signers"): ("admin", _E),
    ("POST", "/admin/signers/{signer}/purge"): ("admin", _E),
    ("GET", "/admin/quotas"): ("admin", _E),
    ("PUT", "/admin/quotas/namespace/{namespace}"): ("admin", _E),
    ("PUT", "/admin/quotas/token/{token}"): ("admin", _E),
    ("POST", "/v1/runs"): ("write", _R),
    ("GET", "/admin/runs"): ("write", _R),
    ("GET", "/admin/runs/{run_id}"): ("write", _R),
    ("GET", "/dashboard/me"): ("read", _N),
    ("GET", "/dashboard/data"): ("read", _E),
    ("GET", "/dashboard/runs"): ("read", _R),
    ("GET", "/dashboard/runs/{run_id}"): ("read", _R),
    ("GET", "/dashboard/namespaces/{namespace}"): ("read", _P),
    ("GET", "/dashboard/graphs"): ("read", _Q),
    ("GET", "/metrics"): ("read", _E),
    ("GET", "/openapi.json"): ("read", _N),
    ("GET", "/docs"): ("open", _N),
    ("GET", "/healthz"): ("open", _N),
    ("GET", "/readyz"): ("open", _N),
    ("GET", "/static/{name}"): ("open", _N),
    ("GET", "/"): ("open", _N),
}


def _declarations(client: TestClient) -> dict[tuple[str, str], Access | None]:
    """Every route of the app with an endpoint (included routers, /docs, /openapi.json, static, health)."""
    found: dict[tuple[str, str], Access | None] = {}
    for context in iter_route_contexts(client.app.routes):  # type: ignore[attr-defined]
        endpoint = getattr(context, "endpoint", None)
        if endpoint is None:
            continue
        for method in getattr(context, "methods", None) or ("*",):
            found[(method, str(context.path))] = declared(endpoint)
    return found


def test_every_route_declares_its_role(auth_client: TestClient) -> None:
    """A new route must declare its role beside itself (cache_server.api.access.declare); a route that
    declares nothing needs admin, and this test fails for it."""
    routes = _declarations(auth_client)
    assert len(routes) >= len(EXPECTED_ACCESS)  # every route of the app is seen (included routers too)
    assert [route for route, access in routes.items() if access is None] == []


def test_every_route_declares_what_it_did_before(auth_client: TestClient) -> None:
    """The same role and scope rule for every route as the tables in cache_server/api/auth.py gave."""
    routes = _declarations(auth_client)
    seen = {
        route: ("open" if access.role is None else access.role.name.lower(), access.scope.value)
        for route, access in routes.items()
        if access is not None
    }
    assert seen == EXPECTED_ACCESS


def test_a_route_that_declares_nothing_needs_admin() -> None:
    assert declared(object()) is None
    assert access_of(object()) == CLOSED
    assert (CLOSED.role, CLOSED.scope) == (Role.ADMIN, Scope.EVERY)


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


def test_the_dashboard_page_asks_for_a_token_and_never_takes_one_from_a_url(
    auth_client: TestClient, tokens: dict[str, str]
) -> None:
    """The page holds no data: it is open and asks for a token in a form (its script sends it as a bearer
    header). A token in a URL would land in access logs: no route takes one there, nor from a cookie."""
    page = auth_client.get("/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="token-form"' in page.text and 'type="password"' in page.text
    assert "set-cookie" not in page.headers
    # an API client asking for JSON still gets the JSON 401 every route gives
    api = auth_client.get("/", headers={"Accept": "application/json"})
    assert api.status_code == 401 and api.json()["error"] == "unauthorized"
    with_token = auth_client.get("/", headers={"Accept": "application/json", **bearer(tokens["read"])})
    assert with_token.status_code == 200
    # the old link: the page, no redirect, no cookie; the token it carries opens nothing
    link = auth_client.get("/", params={"token": tokens["read"]}, follow_redirects=False)
    assert link.status_code == 200 and "set-cookie" not in link.headers
    for path in ("/dashboard/data", "/dashboard/me", "/dashboard/runs", "/openapi.json"):
        assert auth_client.get(path, params={"token": tokens["read"]}).status_code == 401, path
        cookie = {"Cookie": f"xla_cache_token={tokens['read']}"}
        assert auth_client.get(path, headers=cookie).status_code == 401, path
        assert auth_client.get(path, headers=bearer(tokens["read"])).status_code == 200, path
    me = auth_client.get("/dashboard/me", headers=bearer(tokens["read"])).json()
    assert me == {"auth": True, "name": "user-read", "role": "read", "patterns": None, "namespaces": None}
    wrong = auth_client.get("/dashboard/me", headers=bearer("xlc_000000000000_" + "A" * 43))
    assert (wrong.status_code, wrong.json()["detail"]) == (401, "The token is not valid.")


def test_a_scoped_read_token_sees_its_namespaces_in_the_dashboard_and_the_cli_alike(
    stocked: TestClient,
) -> None:
    """A read token limited to ``ns``: the dashboard lists ``ns`` (not ``spare``), opens its page, its
    graphs and its runs; ``GET /admin/graphs`` (``xla-cache graphs``) answers the same; the server-wide
    views stay closed, and ``spare`` is refused both ways."""
    manager = services_of(stocked).tokens
    token = manager.create("ns-reader", Role.READ, ["ns"])[0]
    write = manager.create("ns-writer", Role.WRITE)[0]
    for run_id, namespace in (("a" * 32, "ns"), ("b" * 32, "spare")):
        run = {"run_id": run_id, "namespace": namespace, "framework": "jax", "host": "h", "started_at": 1e9}
        assert stocked.post("/v1/runs", json=run, headers=bearer(write)).status_code == 200
    reader = bearer(token)
    me = stocked.get("/dashboard/me", headers=reader).json()
    assert (me["name"], me["role"], me["patterns"], me["namespaces"]) == ("ns-reader", "read", ["ns"], ["ns"])
    assert stocked.get("/dashboard/namespaces/ns", headers=reader).status_code == 200
    assert stocked.get("/dashboard/namespaces/spare", headers=reader).status_code == 403
    runs = stocked.get("/dashboard/runs", headers=reader).json()["runs"]
    assert [r["namespace"] for r in runs] == ["ns"]
    assert stocked.get(f"/dashboard/runs/{'a' * 32}", headers=reader).status_code == 200
    assert stocked.get(f"/dashboard/runs/{'b' * 32}", headers=reader).status_code == 404
    for url in ("/admin/graphs", "/dashboard/graphs", "/admin/graphs/variants"):
        assert stocked.get(url, params={"namespace": "ns"}, headers=reader).json()["namespace"] == "ns"
        assert stocked.get(url, params={"namespace": "spare"}, headers=reader).status_code == 403, url
    for url in ("/dashboard/data", "/admin/stats", "/metrics"):
        assert stocked.get(url, headers=reader).status_code == 403, url
