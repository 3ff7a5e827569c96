"""The server's own pages (the dashboard at ``/``, the API page at ``/docs``) and their assets.

Nothing is loaded from another host: the servers run on air-gapped clusters and behind strict egress rules.
Each page and asset is a file of ``cache_server/static`` (shipped in the wheel with the package), sent
under one Content-Security-Policy: scripts, styles and requests to this server only, no inline script or
style, no frames. The pages hold no data (open to anyone); their scripts read the data with the token a
person pastes into the page's form (auth on), sent as ``Authorization: Bearer``.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, HTTPException, Response

from cache_server.api.access import declare

__all__ = ["SECURITY_HEADERS", "page", "router"]

_STATIC = resources.files("cache_server") / "static"
_ASSETS = {
    "page.js": "text/javascript",
    "dashboard.js": "text/javascript",
    "dashboard_namespace.js": "text/javascript",
    "docs.js": "text/javascript",
    "dashboard.css": "text/css",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

router = APIRouter(tags=["pages"])


def page(name: str, *, auth: bool) -> Response:
    """The page ``static/<name>``, under the pages' CSP. With ``auth`` its body says so
    (``data-auth="on"``): its script asks for a token at once, without a request that would fail first."""
    html = (_STATIC / name).read_text(encoding="utf-8")
    if auth:
        html = html.replace('<body data-auth="off"', '<body data-auth="on"', 1)
    return Response(html, media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)


@router.get("/static/{name}", response_class=Response, include_in_schema=False)
@declare(None)
def static_file(name: str) -> Response:
    """The pages' scripts and stylesheet (open: they hold no data)."""
    media_type = _ASSETS.get(name)
    if media_type is None:
        raise HTTPException(404, f"There is no static file {name!r}.")
    body = (_STATIC / name).read_bytes()
    return Response(body, media_type=media_type, headers=SECURITY_HEADERS)
