"""Who may call which route: the role table of DESIGN.md, and the one dependency that enforces it.

:func:`authorize` is a dependency of the whole app (``create_app``). With ``XLA_CACHE_AUTH`` off it lets
everything through. With it on, each route needs ``Authorization: Bearer <token>`` with at least the role
:data:`ROUTE_ROLES` gives it; :data:`OPEN_ROUTES` need nothing; a route missing from both needs admin (a
new route stays closed until someone decides). A token is only ever taken from that header: never from a
URL (it would land in access logs) nor a cookie. The dashboard's page (``/``) is open (it holds no data):
its script asks for the token in a form, keeps it in the tab's ``sessionStorage`` and sends it as that
header. A token limited to namespace patterns reaches the routes of the namespaces they match and
:data:`UNSCOPED_ROUTES`, nothing else.

One rule for graphs: a namespace's graphs (``GET /admin/graphs``, which ``xla-cache graphs`` prints, and
the dashboard's ``GET /dashboard/graphs``) need the read role and a token that reaches the namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio.to_thread
from fastapi import Request

from cache_server.api.deps import get_settings, get_tokens
from cache_server.auth.tokens import Principal, Role

__all__ = [
    "NAMESPACE_QUERY_ROUTES",
    "OPEN_ROUTES",
    "ROUTE_ROLES",
    "authorize",
    "bearer_token",
    "principal",
    "principal_name",
    "role_for",
]

PRINCIPAL_KEY = "xla_cache.principal"  # the request scope key under which the checked principal is kept

_NS = "/v1/namespaces/{namespace}"
ROUTE_ROLES: dict[tuple[str, str], Role] = {
    ("PUT", _NS): Role.WRITE,
    ("GET", _NS): Role.READ,
    ("PUT", f"{_NS}/entries/{{key:path}}"): Role.WRITE,
    ("POST", f"{_NS}/entries"): Role.WRITE,
    ("GET", f"{_NS}/feed"): Role.READ,
    ("GET", f"{_NS}/entries/{{key:path}}"): Role.READ,
    ("HEAD", f"{_NS}/entries/{{key:path}}"): Role.READ,
    ("DELETE", f"{_NS}/entries/{{key:path}}"): Role.ADMIN,
    ("POST", f"{_NS}/missing"): Role.READ,
    ("GET", f"{_NS}/manifest"): Role.READ,
    ("POST", f"{_NS}/bundle"): Role.READ,
    ("POST", f"{_NS}/urls"): Role.READ,
    ("GET", f"{_NS}/nearest"): Role.READ,
    ("POST", f"{_NS}/nearest"): Role.READ,
    ("GET", "/admin/stats"): Role.ADMIN,
    ("POST", "/admin/evict"): Role.ADMIN,
    ("POST", "/admin/gc"): Role.ADMIN,
    ("POST", "/admin/pack"): Role.ADMIN,
    ("DELETE", "/admin/namespaces/{namespace}"): Role.ADMIN,
    ("GET", "/admin/tokens"): Role.ADMIN,
    ("GET", "/admin/graphs"): Role.READ,  # a namespace's graphs: as the dashboard's, for the read role
    ("POST", "/admin/tokens/{token}/purge"): Role.ADMIN,
    ("GET", "/admin/signers"): Role.ADMIN,
    ("POST", "/admin/signers/{signer}/purge"): Role.ADMIN,
    ("GET", "/admin/quotas"): Role.ADMIN,
    ("PUT", "/admin/quotas/namespace/{namespace}"): Role.ADMIN,
    ("PUT", "/admin/quotas/token/{token}"): Role.ADMIN,
    ("POST", "/v1/runs"): Role.WRITE,  # the namespace is in the body: checked by the route
    ("GET", "/admin/runs"): Role.WRITE,  # admin, or a scoped write token (its namespaces): the route checks
    ("GET", "/admin/runs/{run_id}"): Role.WRITE,
    ("GET", "/dashboard/me"): Role.READ,
    ("GET", "/dashboard/data"): Role.READ,
    ("GET", "/dashboard/runs"): Role.READ,
    ("GET", "/dashboard/runs/{run_id}"): Role.READ,
    ("GET", "/dashboard/namespaces/{namespace}"): Role.READ,
    ("GET", "/dashboard/graphs"): Role.READ,
    ("GET", "/metrics"): Role.READ,  # it names every namespace
    ("GET", "/openapi.json"): Role.READ,
    ("GET", "/docs"): Role.READ,
}
# the dashboard's page and its script hold no data: the page asks for a token and its script sends it
OPEN_ROUTES = frozenset({"/healthz", "/readyz", "/static/{name}", "/"})
# name no namespace: any valid token may read them (/dashboard/me: the token's own name, role and reach)
UNSCOPED_ROUTES = frozenset({"/openapi.json", "/docs", "/dashboard/me"})
# name their namespaces elsewhere (a body, a stored run): the route itself checks a scoped token's reach
SELF_SCOPED_ROUTES = frozenset(
    {"/v1/runs", "/admin/runs", "/admin/runs/{run_id}", "/dashboard/runs", "/dashboard/runs/{run_id}"}
)
NAMESPACE_ROUTES = ("/v1/namespaces/", "/dashboard/namespaces/")  # their {namespace} is checked for scope
# Routes about the one namespace of their ``namespace`` query parameter, and the role a token limited to
# namespace patterns needs there (it reaches the namespaces it covers); others need the ROUTE_ROLES role.
NAMESPACE_QUERY_ROUTES: dict[tuple[str, str], Role] = {
    ("GET", "/admin/graphs"): Role.READ,
    ("GET", "/dashboard/graphs"): Role.READ,
}


def role_for(method: str, path: str) -> Role:
    """The role a route needs: from the table; HEAD as its GET; anything else admin."""
    role = ROUTE_ROLES.get((method, path))
    if role is None and method == "HEAD":
        role = ROUTE_ROLES.get(("GET", path))
    return role if role is not None else Role.ADMIN


def bearer_token(request: Request) -> str | None:
    """The token of the request's ``Authorization: Bearer`` header, if any (the only place one is read)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


async def authorize(request: Request) -> None:
    """Let the request through if auth is off, the route is open, or the token's role is enough.

    Raises :class:`~cache_server.errors.Unauthorized` (no valid token) or
    :class:`~cache_server.errors.Forbidden` (a role too weak for the route). A coroutine: with auth off it
    costs no thread; with auth on, the token's lookup runs on one.
    """
    if not get_settings(request).auth:
        return
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    if path in OPEN_ROUTES:
        return
    await anyio.to_thread.run_sync(_check_token, request, path)


def _check_token(request: Request, path: str) -> None:
    token = bearer_token(request)
    tokens = get_tokens(request)
    principal = tokens.authenticate(token)
    request.scope[PRINCIPAL_KEY] = principal
    action = f"{request.method} {path}"
    scoped_role = NAMESPACE_QUERY_ROUTES.get((request.method, path))
    needed = role_for(request.method, path)
    if scoped_role is not None and principal.namespaces is not None:
        needed = scoped_role  # a namespace-limited token: it reaches only the namespaces it covers
    tokens.authorize(principal, needed, action)
    if path not in UNSCOPED_ROUTES and path not in SELF_SCOPED_ROUTES:
        namespace = request.path_params.get("namespace") if path.startswith(NAMESPACE_ROUTES) else None
        if scoped_role is not None:  # one namespace named once, or none (no scoped token passes then)
            named = request.query_params.getlist("namespace")
            namespace = named[0] if len(named) == 1 else None
        tokens.authorize_namespace(principal, namespace, action)


def principal(request: Request) -> Principal | None:
    """The token a request was allowed with; None with auth off (or on an open route)."""
    found = request.scope.get(PRINCIPAL_KEY)
    return found if isinstance(found, Principal) else None


def principal_name(scope: Mapping[str, Any]) -> str | None:
    """The name of the token a request was allowed with (for the access log), if any."""
    principal = scope.get(PRINCIPAL_KEY)
    return principal.name if isinstance(principal, Principal) else None
