"""Who may call which route, and the one dependency that enforces it.

:func:`authorize` is a dependency of the whole app (``create_app``). With ``XLA_CACHE_AUTH`` off it lets
everything through. With it on, each route needs ``Authorization: Bearer <token>`` with at least the role
the route declares beside itself (:func:`cache_server.api.access.declare`); an open route (``role=None``)
needs nothing; a route that declares nothing needs admin (a new route stays closed until someone decides).
A token is only ever taken from that header: never from a URL (it would land in access logs) nor a cookie.
The dashboard's page (``/``) is open (it holds no data): its script asks for the token in a form, keeps it in
the tab's ``sessionStorage`` and sends it as that header. A token limited to namespace patterns reaches the
namespace its route's :class:`~cache_server.api.access.Scope` names, and routes about none
(``Scope.NONE``), nothing else.

One rule for graphs: a namespace's graphs (``GET /admin/graphs``, which ``xla-cache graphs`` prints, and
the dashboard's ``GET /dashboard/graphs``) need the read role and a token that reaches the namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio.to_thread
from fastapi import Request

from cache_server.api.access import Access, Scope, access_of
from cache_server.api.deps import get_settings, get_tokens
from cache_server.auth.tokens import Principal, Role

__all__ = ["authorize", "bearer_token", "principal", "principal_name", "role_for"]

PRINCIPAL_KEY = "xla_cache.principal"  # the request scope key under which the checked principal is kept


def role_for(route: object) -> Role:
    """The role a matched route needs: its declaration's; admin for one that declares nothing."""
    return access_of(route).role or Role.ADMIN


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
    access = access_of(route)
    if access.open:
        return
    await anyio.to_thread.run_sync(_check_token, request, getattr(route, "path", request.url.path), access)


def _check_token(request: Request, path: str, access: Access) -> None:
    token = bearer_token(request)
    tokens = get_tokens(request)
    principal = tokens.authenticate(token)
    request.scope[PRINCIPAL_KEY] = principal
    action = f"{request.method} {path}"
    tokens.authorize(principal, access.role or Role.ADMIN, action)
    if access.scope in (Scope.NONE, Scope.ROUTE):
        return
    namespace: str | None = None  # Scope.EVERY: no scoped token passes
    if access.scope is Scope.PATH_NAMESPACE:
        namespace = request.path_params.get("namespace")
    elif access.scope is Scope.QUERY_NAMESPACE:  # one namespace named once, or none
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
