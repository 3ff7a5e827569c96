"""The dashboard: one page at ``/`` with its script and stylesheet, served by the server itself.

No outside CDN (the machines have no internet): the charts are inline SVG drawn by ``dashboard.js``, which
reads ``/dashboard/data`` (the same numbers as ``/admin/stats``, for the read role). With auth on, a person
opens ``/?token=<a read token>`` once: the token is checked, put in an HttpOnly, SameSite=Strict cookie and
the browser is sent to ``/`` so the token leaves the address bar (and the history). The cookie is only
accepted by the dashboard's two routes, never by the API.
"""

from __future__ import annotations

from importlib import resources
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import RedirectResponse

from cache_server.admin.stats import StatsQuery
from cache_server.api.admin import PAGE_AFTER, PAGE_LIMIT
from cache_server.api.admin_schemas import StatsOut
from cache_server.api.auth import COOKIE_NAME
from cache_server.api.deps import AdminDep, RunsDep, SettingsDep
from cache_server.api.run_schemas import RunDetailOut, RunOut, RunsOut
from cache_server.index.runs import RunFilter

__all__ = ["router"]

_STATIC = resources.files("cache_server") / "static"
_ASSETS = {
    "dashboard.js": "text/javascript",
    "dashboard_namespace.js": "text/javascript",
    "dashboard.css": "text/css",
}
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

router = APIRouter(tags=["dashboard"])


@router.get("/", response_class=Response, include_in_schema=False)
def dashboard(
    request: Request,
    settings: SettingsDep,
    token: Annotated[
        str | None, Query(description="A token to remember in a cookie (then redirected).")
    ] = None,
) -> Response:
    """The dashboard page: totals, hit rate over time, bytes per namespace, graphs with the most variants."""
    if token is not None:
        redirect = RedirectResponse("/", status_code=303, headers=_SECURITY_HEADERS)
        if settings.auth:
            redirect.set_cookie(
                COOKIE_NAME,
                token,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
                path="/",
            )
        return redirect
    html = (_STATIC / "dashboard.html").read_text(encoding="utf-8")
    return Response(html, media_type="text/html; charset=utf-8", headers=_SECURITY_HEADERS)


@router.get("/dashboard/data", response_model=StatsOut)
def dashboard_data(
    admin: AdminDep,
    runs: RunsDep,
    settings: SettingsDep,
    days: Annotated[int, Query(ge=1, le=3660)] = 30,
    top: Annotated[int, Query(ge=0, le=100)] = 10,
    limit: Annotated[int | None, Query(ge=1, le=10_000, description=PAGE_LIMIT)] = None,
    after: Annotated[str | None, Query(max_length=200, description=PAGE_AFTER)] = None,
) -> StatsOut:
    """The numbers the dashboard draws (the same as ``GET /admin/stats``, a page of namespaces at a time:
    ``limit`` and ``after`` as there)."""
    limit = limit or settings.stats_page_namespaces
    report = admin.stats(StatsQuery(days=days, top=top, limit=limit, after=after))
    return StatsOut.of(report, jobs=runs.totals(days=days))


@router.get("/dashboard/runs", response_model=RunsOut)
def dashboard_runs(runs: RunsDep, limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> RunsOut:
    """The latest runs the dashboard charts (the same as ``GET /admin/runs``, for the dashboard's role)."""
    return RunsOut(runs=[RunOut.of(run) for run in runs.list_runs(RunFilter(limit=limit))])


@router.get(
    "/dashboard/runs/{run_id}", response_model=RunDetailOut, responses={404: {"description": "No such run"}}
)
def dashboard_run(
    run_id: str, runs: RunsDep, limit: Annotated[int, Query(ge=0, le=1000)] = 100
) -> RunDetailOut:
    """One run and why it compiled (the same as ``GET /admin/runs/{run_id}``)."""
    return RunDetailOut.of(runs.detail(run_id, patterns=None, limit=limit))


@router.get("/static/{name}", response_class=Response, include_in_schema=False)
def static_file(name: str) -> Response:
    """The dashboard's script and stylesheet (open: they hold no data)."""
    media_type = _ASSETS.get(name)
    if media_type is None:
        raise HTTPException(404, f"There is no static file {name!r}.")
    body = (_STATIC / name).read_bytes()
    return Response(body, media_type=media_type, headers={"Cache-Control": "no-cache", **_SECURITY_HEADERS})
