"""Run reports: a job reports its run (``POST /v1/runs``, write role), and the runs are listed and explained
(``GET /admin/runs``, ``GET /admin/runs/{run_id}``: admin, or a write token limited to namespace patterns,
which sees the runs of the namespaces it covers)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Query, Request

from cache_protocol import NAMESPACE_MAX_LENGTH
from cache_protocol.runs import HOST_MAX_LENGTH, MAX_MISSES_PER_RUN, Framework
from cache_server.api.access import Scope, declare
from cache_server.api.auth import principal
from cache_server.api.deps import RunsDep, TokensDep
from cache_server.api.run_schemas import RunDetailOut, RunOut, RunReportIn, RunsOut
from cache_server.auth.tokens import Role
from cache_server.domain.runs import RunFilter
from cache_server.errors import Forbidden
from cache_server.names import check_namespace

__all__ = ["router"]

router = APIRouter(tags=["runs"])
MAX_LIST = 1000
MAX_PAGE = 1000  # misses one request explains and lists (each costs its explanation); page with offset


@router.post(
    "/v1/runs",
    response_model=RunOut,
    responses={
        403: {"description": "run_owned: another token reported this run id first"},
        409: {"description": "run_conflict: the run was reported with another namespace or framework"},
    },
)
@declare(
    Role.WRITE,
    Scope.ROUTE,
    answers={"507": "quota_exceeded: a new run past XLA_CACHE_MAX_RUNS_PER_TOKEN (nothing stored)"},
)
def report_run(body: RunReportIn, request: Request, runs: RunsDep, tokens: TokensDep) -> RunOut:
    """Store a run's report: its cumulative numbers (each kept as the larger of this and the last report's)
    and its misses not reported before (at most ``MAX_MISSES_PER_RUN`` kept per run, the rest counted).
    403 ``run_owned`` if another token reported this run id first; 409 ``run_conflict`` if the run was
    reported with another namespace or framework; 507 ``quota_exceeded`` for a new run of a token that keeps
    ``XLA_CACHE_MAX_RUNS_PER_TOKEN`` runs; 400 for anything out of bounds. Nothing is stored then. Misses
    past the token's or the namespace's budget of stored misses are counted in the run's numbers, not
    stored (``misses_stored`` says how many are)."""
    who = principal(request)
    if who is not None:
        tokens.authorize_namespace(who, body.namespace, "POST /v1/runs")
    run = runs.report(
        body.report(),
        reported_by=None if who is None else who.token_id,
        metrics_on=who is None or not who.metrics_off,
    )
    return RunOut.of(run)


def _visible(request: Request) -> tuple[str, ...] | None:
    """The namespace patterns the caller may see runs of (None: every namespace)."""
    who = principal(request)
    if who is None or who.role >= Role.ADMIN:
        return None
    if who.namespaces is None:
        raise Forbidden(
            f"The token {who.name!r} has the {who.role.label} role; the runs of every namespace need the "
            "admin role (a write token limited to namespace patterns sees the runs of those namespaces)."
        )
    return who.namespaces


@router.get("/admin/runs", response_model=RunsOut)
@declare(Role.WRITE, Scope.ROUTE)
def list_runs(
    request: Request,
    runs: RunsDep,
    namespace: Annotated[
        str | None, Query(max_length=NAMESPACE_MAX_LENGTH, description="Only this namespace.")
    ] = None,
    framework: Annotated[Framework | None, Query()] = None,
    host: Annotated[
        str | None, Query(max_length=HOST_MAX_LENGTH, description="Only runs of this host.")
    ] = None,
    since: Annotated[dt.datetime | None, Query(description="Runs started at or after this time.")] = None,
    until: Annotated[dt.datetime | None, Query(description="Runs started before this time.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST, description="At most this many runs.")] = 100,
) -> RunsOut:
    """Runs, the latest started first, with their hit rate and the compile seconds they paid and saved."""
    if namespace is not None:
        check_namespace(namespace)
    query = RunFilter(
        namespace=namespace,
        framework=framework,
        host=host,
        since=_aware(since),
        until=_aware(until),
        patterns=_visible(request),
        limit=limit,
    )
    return RunsOut(runs=[RunOut.of(run) for run in runs.list_runs(query)])


@router.get(
    "/admin/runs/{run_id}",
    response_model=RunDetailOut,
    responses={
        404: {"description": "No such run"},
        409: {"description": "run_ambiguous: several runs start with this prefix (listed)"},
        503: {"description": "runs_busy: the server explains run_details_at_once run details already"},
    },
)
@declare(Role.WRITE, Scope.ROUTE)
def run_detail(
    run_id: str,
    request: Request,
    runs: RunsDep,
    limit: Annotated[int, Query(ge=0, le=MAX_PAGE, description="At most this many misses listed.")] = 100,
    offset: Annotated[
        int, Query(ge=0, le=MAX_MISSES_PER_RUN, description="List the misses from this one (0: the first).")
    ] = 0,
) -> RunDetailOut:
    """A run and why it compiled: a page of its misses (in the order reported) each with its reason and
    what supports it (the differing dimensions, the differing JAX cache-key components, the baked sizes,
    the tombstone, the advice), the count of each reason, and each listed module's bucketing report.
    ``run_id`` may be a unique prefix of the id (at least 4 characters); 409 ``run_ambiguous`` lists the
    runs that start with it. At most ``XLA_CACHE_RUN_DETAILS_AT_ONCE`` (2) details are explained at once by
    the whole server; one more waits up to ``XLA_CACHE_RUN_DETAIL_WAIT_SECONDS`` (10 s), then 503
    ``runs_busy`` (Retry-After)."""
    detail = runs.detail(run_id, patterns=_visible(request), limit=limit, offset=offset)
    return RunDetailOut.of(detail)


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    """The time in UTC (one without a zone is UTC); one past the ends of the range in UTC (9999-12-31 at
    -14:00, 0001-01-01 at +14:00) is the end it is past: a filter by it keeps every run or none."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    try:
        return value.astimezone(dt.timezone.utc)
    except OverflowError:
        end = dt.datetime.max if value.year == dt.MAXYEAR else dt.datetime.min
        return end.replace(tzinfo=dt.timezone.utc)
