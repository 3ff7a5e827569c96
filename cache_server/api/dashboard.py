"""The dashboard: one page at ``/`` with its scripts and stylesheet, served by the server itself
(:mod:`cache_server.api.pages`).

No outside CDN (the machines have no internet): the charts are inline SVG drawn by ``dashboard.js``, which
reads ``/dashboard/data`` (the same numbers as ``/admin/stats``, for the read role). With auth on, the page
(open: it holds no data) asks for a token in a form; the script keeps it in the tab's ``sessionStorage``
(gone when the tab closes, or on "Sign out") and sends it as ``Authorization: Bearer`` with each request.
A token never travels in a URL, so none lands in an access log or the browser's history.

Each view has its own address, a hash route: ``#/`` (overview), ``#/runs``, ``#/runs/<run id>``,
``#/graphs``, ``#/graphs/<namespace>``, ``#/graphs/<namespace>/<module>`` and ``#/namespaces/<name>``.
A token limited to namespace patterns sees its namespaces (``/dashboard/me`` lists them), their runs,
graphs and pages; the server-wide views stay closed to it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from cache_server.admin.stats import StatsQuery
from cache_server.api.access import Scope, declare
from cache_server.api.admin import PAGE_AFTER, PAGE_LIMIT
from cache_server.api.admin_schemas import StatsOut
from cache_server.api.auth import bearer_token, principal
from cache_server.api.deps import AdminDep, RunsDep, SettingsDep, TokensDep
from cache_server.api.pages import page
from cache_server.api.run_schemas import RunDetailOut, RunOut, RunsOut
from cache_server.auth.tokens import Role
from cache_server.domain.runs import RunFilter

__all__ = ["router"]

router = APIRouter(tags=["dashboard"])


def _wants_json(request: Request) -> bool:
    """An API client that asked for JSON and not a page (a browser's Accept names text/html)."""
    accept = request.headers.get("accept", "").lower()
    return "application/json" in accept and "text/html" not in accept


@router.get("/", response_class=Response, include_in_schema=False)
@declare(None)
def dashboard(request: Request, settings: SettingsDep, tokens: TokensDep) -> Response:
    """The dashboard page: totals, hit rate over time, bytes per namespace, graphs with the most variants,
    runs. With auth on it asks for a token (it holds no data itself); a client asking for JSON without a
    valid token gets the JSON 401 every route gives."""
    if settings.auth and _wants_json(request):
        tokens.authenticate(bearer_token(request))  # Unauthorized: answered as everywhere else
    return page("dashboard.html", auth=settings.auth)


class MeOut(BaseModel):
    """Who the dashboard is signed in as, and what it may show."""

    auth: bool = Field(description="Whether the server checks tokens.")
    name: str | None = Field(description="The token's name (null with auth off).")
    role: str | None = Field(description="read, write or admin (null with auth off).")
    patterns: list[str] | None = Field(
        description="The namespace patterns the token is limited to; null: every namespace."
    )
    namespaces: list[str] | None = Field(
        description="For a limited token: the namespaces holding entries that it reaches; else null."
    )


@router.get("/dashboard/me", response_model=MeOut, include_in_schema=False)
@declare(Role.READ, Scope.NONE)
def dashboard_me(request: Request, admin: AdminDep) -> MeOut:
    """The token the dashboard signed in with: checks it, and tells a limited token's namespaces."""
    who = principal(request)
    if who is None:
        return MeOut(auth=False, name=None, role=None, patterns=None, namespaces=None)
    if who.namespaces is None:
        return MeOut(auth=True, name=who.name, role=who.role.label, patterns=None, namespaces=None)
    reached = sorted(ns for ns in admin.stored_by_namespace() if who.may_use(ns))
    return MeOut(
        auth=True, name=who.name, role=who.role.label, patterns=list(who.namespaces), namespaces=reached
    )


@router.get("/dashboard/data", response_model=StatsOut)
@declare(Role.READ)
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
    jobs = runs.scopes(days=days, namespace=None, namespaces=[ns.name for ns in report.namespaces])
    return StatsOut.of(report, jobs=jobs)


def _patterns(request: Request) -> tuple[str, ...] | None:
    """The namespace patterns a limited token reaches (None: every namespace)."""
    who = principal(request)
    return None if who is None else who.namespaces


@router.get("/dashboard/runs", response_model=RunsOut)
@declare(Role.READ, Scope.ROUTE)
def dashboard_runs(
    request: Request, runs: RunsDep, limit: Annotated[int, Query(ge=1, le=1000)] = 50
) -> RunsOut:
    """The latest runs the dashboard charts (the same as ``GET /admin/runs``, for the dashboard's role; a
    token limited to namespace patterns sees the runs of its namespaces)."""
    query = RunFilter(limit=limit, patterns=_patterns(request))
    return RunsOut(runs=[RunOut.of(run) for run in runs.list_runs(query)])


@router.get(
    "/dashboard/runs/{run_id}", response_model=RunDetailOut, responses={404: {"description": "No such run"}}
)
@declare(Role.READ, Scope.ROUTE)
def dashboard_run(
    run_id: str,
    request: Request,
    runs: RunsDep,
    limit: Annotated[int, Query(ge=0, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> RunDetailOut:
    """One run and why it compiled, a page of its compiles from ``offset`` (the same as ``GET
    /admin/runs/{run_id}``; 404 for a run of a namespace a limited token does not reach)."""
    detail = runs.detail(run_id, patterns=_patterns(request), limit=limit, offset=offset)
    return RunDetailOut.of(detail)
