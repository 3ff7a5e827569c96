"""The OpenAPI document and its interactive page, behind the same role check as every other route.

FastAPI serves them itself by default, outside the app's dependencies, so with ``XLA_CACHE_AUTH=on`` anyone
could read them; here they are ordinary routes, given the read role in :mod:`cache_server.api.auth`. A
browser sends the dashboard's cookie (open ``/?token=<token>`` once), like the dashboard's own routes.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

__all__ = ["router"]

router = APIRouter(tags=["docs"], include_in_schema=False)


@router.get("/openapi.json")
def openapi(request: Request) -> JSONResponse:
    """The OpenAPI document of the API."""
    document: dict[str, Any] = request.app.openapi()
    return JSONResponse(document)


@router.get("/docs")
def docs(request: Request) -> HTMLResponse:
    """The interactive API page."""
    return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{request.app.title} API")
