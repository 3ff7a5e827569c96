"""A route declares who may call it, which namespace it is about, and what it answers besides success.

Each endpoint carries its :class:`Access`, recorded by :func:`declare` beside the route in its own module::

    @router.get("/v1/namespaces/{namespace}")
    @declare(Role.READ, Scope.PATH_NAMESPACE, answers={"404": "The namespace has never been registered"})
    def get_namespace(...): ...

:func:`cache_server.api.auth.authorize` reads it from the matched route (``request.scope["route"]``) and
:mod:`cache_server.api.docs` from the app's routes when it decorates the OpenAPI document. A route that
declares nothing needs the admin role and a token that reaches every namespace (closed until someone
decides); ``tests/admin/test_auth.py`` fails for any route of the app that declares nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from fastapi.routing import APIRoute, RouteContext, iter_route_contexts
from starlette.routing import BaseRoute

from cache_server.auth.tokens import Role

__all__ = [
    "CLOSED",
    "NO_NAMESPACE",
    "NO_TOKEN",
    "QUOTA",
    "Access",
    "Scope",
    "access_of",
    "api_routes",
    "by_operation",
    "declare",
    "declared",
    "open_paths",
]

_ATTRIBUTE = "__xla_cache_access__"
_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])


class Scope(enum.Enum):
    """Which namespace a request is about, for a token limited to namespace patterns."""

    EVERY = "every"  # none named: only a token that reaches every namespace passes
    PATH_NAMESPACE = "path"  # the route's {namespace} path parameter
    QUERY_NAMESPACE = "query"  # its ``namespace`` query parameter, given once
    ROUTE = "route"  # named elsewhere (a body, a stored run): the route itself checks the token's reach
    NONE = "none"  # about no namespace: any valid token may call it


@dataclass(frozen=True)
class Access:
    """A route's declaration: its role (None: open, no token needed), scope rule and extra statuses."""

    role: Role | None
    scope: Scope = Scope.EVERY
    answers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def open(self) -> bool:
        return self.role is None


# Answers several routes declare
QUOTA = "Past a quota of the namespace or token (GET /admin/quotas), or XLA_CACHE_MAX_NAMESPACES_PER_TOKEN"
NO_NAMESPACE = "The namespace has never been registered"
NO_TOKEN = "No token has this name or id"

CLOSED = Access(Role.ADMIN, Scope.EVERY)  # what a route that declares nothing gets


def declare(
    role: Role | None, scope: Scope = Scope.EVERY, answers: Mapping[str, str] | None = None
) -> Callable[[_Endpoint], _Endpoint]:
    """Record the endpoint's :class:`Access` (``role=None``: an open route, needing no token)."""
    access = Access(role, Scope.NONE if role is None else scope, MappingProxyType(dict(answers or {})))

    def mark(endpoint: _Endpoint) -> _Endpoint:
        setattr(endpoint, _ATTRIBUTE, access)
        return endpoint

    return mark


def declared(endpoint: object) -> Access | None:
    """The endpoint's declaration, or None if it declares nothing."""
    found = getattr(endpoint, _ATTRIBUTE, None)
    return found if isinstance(found, Access) else None


def access_of(route: object) -> Access:
    """A matched route's declaration; :data:`CLOSED` for one without (or for no route)."""
    return declared(getattr(route, "endpoint", None)) or CLOSED


def api_routes(routes: Sequence[BaseRoute]) -> Iterator[RouteContext]:
    """The API routes of ``routes`` (an app's), those of included routers with their full paths."""
    return (
        context for context in iter_route_contexts(routes) if isinstance(context.original_route, APIRoute)
    )


def by_operation(routes: Sequence[BaseRoute]) -> dict[tuple[str, str], Access]:
    """The declarations by (lower-case method, path as the OpenAPI document writes it) of ``routes``."""
    return {
        (method.lower(), str(context.path_format)): access_of(context)
        for context in api_routes(routes)
        for method in context.methods or ()
    }


def open_paths(routes: Sequence[BaseRoute]) -> frozenset[str]:
    """The paths (as the OpenAPI document writes them) of the open routes of ``routes``."""
    return frozenset(str(context.path_format) for context in api_routes(routes) if access_of(context).open)
