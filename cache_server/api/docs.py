"""The OpenAPI document and its interactive page, behind the same role check as every other route.

FastAPI serves them itself by default, outside the app's dependencies, so with ``XLA_CACHE_AUTH=on`` anyone
could read them; here they are ordinary routes, given the read role in :mod:`cache_server.api.auth`. A
browser sends the dashboard's cookie (open ``/?token=<token>`` once), like the dashboard's own routes.

:func:`describe` makes the document say what the server does: invalid input is a 400 with the error body
(FastAPI would declare 422), namespaces and keys have their patterns, and routes take bearer tokens.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from cache_protocol import KEY_MAX_LENGTH, KEY_PATTERN, NAMESPACE_MAX_LENGTH, NAMESPACE_PATTERN

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


def describe(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with 400 for invalid input, the name patterns, and the bearer scheme."""
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
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            if responses.pop("422", None) is not None or operation.get("parameters"):
                responses.setdefault("400", invalid)
            for parameter in operation.get("parameters", []):
                name = parameter.get("name")
                if parameter.get("in") == "path" and name in _PATTERNS:
                    pattern, longest = _PATTERNS[name]
                    parameter["schema"] = {"type": "string", "pattern": f"^{pattern}$", "maxLength": longest}
    return document


@router.get("/openapi.json")
def openapi(request: Request) -> JSONResponse:
    """The OpenAPI document of the API."""
    return JSONResponse(describe(copy.deepcopy(request.app.openapi())))


@router.get("/docs")
def docs(request: Request) -> HTMLResponse:
    """The interactive API page."""
    return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{request.app.title} API")
