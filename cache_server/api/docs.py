"""The OpenAPI document, behind the same role check as every other route, and the page that shows it.

FastAPI serves them itself by default, outside the app's dependencies, so with ``XLA_CACHE_AUTH=on`` anyone
could read the document; here it is an ordinary route, declaring the read role
(:mod:`cache_server.api.access`) (send the token as ``Authorization: Bearer``, as to every route). FastAPI's
pages (Swagger UI, ReDoc) load their scripts from a CDN, which an air-gapped cluster cannot reach: ``/docs``
is a page of our own (``static/docs.html`` and ``docs.js``, :mod:`cache_server.api.pages`), open as the
dashboard is (it holds no data: with auth on it asks for a token and reads the document with it); ReDoc is
not served.

:func:`describe` makes the document say what the server does: invalid input is a 400 with the error body
(FastAPI would declare 422), namespaces and keys have their patterns, routes take bearer tokens, and every
status a route answers is declared: the errors the routes raise (which FastAPI cannot see: the one mapping is
:mod:`cache_server.api.errors`) as well as their successes. ``tests/reliability/test_schemathesis.py`` checks
every answer against the document.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.routing import BaseRoute

from cache_protocol import KEY_MAX_LENGTH, KEY_PATTERN, NAMESPACE_MAX_LENGTH, NAMESPACE_PATTERN
from cache_server.api.access import CLOSED, Access, Scope, by_operation, declare
from cache_server.api.deps import SettingsDep
from cache_server.api.pages import page
from cache_server.api.schemas import INDEX_INT_MAX
from cache_server.auth.tokens import Role

__all__ = ["describe", "router"]

router = APIRouter(tags=["docs"], include_in_schema=False)


_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
    "required": ["error", "detail"],
}
_PATTERNS = {
    "namespace": (NAMESPACE_PATTERN.pattern, NAMESPACE_MAX_LENGTH),
    "key": (KEY_PATTERN.pattern, KEY_MAX_LENGTH),
}
_ENTRY = "/v1/namespaces/{namespace}/entries/{key}"
_HEALTH = "/healthz"  # the one route that needs neither the index nor the store
_AUTH = {
    "401": "No valid bearer token (XLA_CACHE_AUTH=on): none, unknown or revoked",
    "403": "The token's role, or its namespaces, do not allow this",
}
_BODY = {
    "408": "The body stopped arriving, or came too slowly: XLA_CACHE_BODY_TIMEOUT_SECONDS and "
    "XLA_CACHE_MIN_UPLOAD_BYTES_PER_SECOND (a bulk upload also XLA_CACHE_MAX_BULK_SECONDS)",
    "413": "The body is over its limit (XLA_CACHE_MAX_JSON_BYTES; entries: XLA_CACHE_MAX_ENTRY_BYTES; "
    "bulk uploads: XLA_CACHE_MAX_BULK_BYTES, XLA_CACHE_MAX_BULK_HEADER_BYTES)",
}
_UNAVAILABLE = "The index or the blob store is unreachable, or every upload slot stayed busy; see Retry-After"
# The entry upload reads its body as a stream, which FastAPI cannot see: it declares none.
_ENTRY_BODY = {
    "required": True,
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
}


def describe(document: dict[str, Any], routes: Sequence[BaseRoute] = ()) -> dict[str, Any]:
    """``document`` with 400 for invalid input, the name patterns, the bearer scheme, and the statuses the
    ``routes`` (the app's) declare (:func:`cache_server.api.access.declare`)."""
    declarations = by_operation(routes)
    components = document.setdefault("components", {})
    components.setdefault("schemas", {})["Error"] = _ERROR
    components["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "From xla-cache-server token create; needed with XLA_CACHE_AUTH=on.",
        }
    }
    document["security"] = [{"bearer": []}, {}]  # {}: a server with auth off takes none
    invalid = {
        "description": "Invalid input (names, digests, bodies, parameters)",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    for schema in components["schemas"].values():
        _whole_bounds(schema)
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            if responses.pop("422", None) is not None or operation.get("parameters"):
                responses.setdefault("400", invalid)
            for parameter in operation.get("parameters", []):
                name = parameter.get("name")
                if parameter.get("in") in ("path", "query") and name in _PATTERNS:
                    pattern, longest = _PATTERNS[name]
                    parameter["schema"] = {"type": "string", "pattern": f"^{pattern}$", "maxLength": longest}
            if (method, path) == ("put", _ENTRY):
                operation.setdefault("requestBody", copy.deepcopy(_ENTRY_BODY))
            _declare_answers(path, method, operation, responses, declarations.get((method, path), CLOSED))
        get, head = operations.get("get"), operations.get("head")
        if get is not None and head is not None and "200" in get.get("responses", {}):
            # A HEAD answers the GET's status and headers, without a body (FastAPI would declare JSON).
            head["responses"]["200"] = copy.deepcopy(get["responses"]["200"])
    return document


def _whole_bounds(schema: Any) -> None:
    """Integer bounds as whole numbers: FastAPI's document model holds them as floats, where 2^63 - 1 (the
    largest the index holds) would read 2^63, one more than the server takes."""
    if isinstance(schema, list):
        for item in schema:
            _whole_bounds(item)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "integer":
        for bound in ("minimum", "maximum"):
            value = schema.get(bound)
            if isinstance(value, float) and value.is_integer():
                schema[bound] = max(-INDEX_INT_MAX - 1, min(int(value), INDEX_INT_MAX))
    for value in schema.values():
        if isinstance(value, dict | list):
            _whole_bounds(value)


def _declare_answers(
    path: str, method: str, operation: dict[str, Any], responses: dict[str, Any], access: Access
) -> None:
    """Declare the statuses the route answers beyond its success and 400 (see the module docstring)."""

    def error(description: str) -> dict[str, Any]:
        return {
            "description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }

    extra: dict[str, str] = {}
    if not access.open:
        extra.update(_AUTH)
    if "requestBody" in operation or (method, path) == ("put", _ENTRY):
        extra.update(_BODY)
    if path != _HEALTH:
        extra["503"] = _UNAVAILABLE
    for status, description in {**extra, **access.answers}.items():
        if status in responses:
            continue
        if status == "201":  # a created resource: the same body as its 200
            responses[status] = {**responses.get("200", {}), "description": description}
        elif status == "304":
            responses[status] = {"description": description}
        else:
            responses[status] = error(description)


@router.get("/openapi.json")
@declare(Role.READ, Scope.NONE)
def openapi(request: Request) -> JSONResponse:
    """The OpenAPI document of the API."""
    return JSONResponse(describe(copy.deepcopy(request.app.openapi()), request.app.routes))


@router.get("/docs", response_class=Response)
@declare(None)
def docs(settings: SettingsDep) -> Response:
    """The API page: every route, grouped by tag, with a filter (open: it holds no data; its script reads
    ``/openapi.json`` with the token pasted into its form)."""
    return page("docs.html", auth=settings.auth)
