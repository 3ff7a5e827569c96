"""The bucketing report over HTTP: which dimensions of a namespace's graphs vary, and what padding them
would save (``GET /admin/graphs``; the dashboard's graph view reads the same at ``/dashboard/graphs``).
Routes only: their bodies are :mod:`cache_server.api.graph_schemas`.

Both declare the read role with their ``namespace`` query parameter as scope: a token limited to namespace
patterns (read or write) may ask for a namespace it covers (:class:`cache_server.api.access.Scope`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from cache_protocol.runs import MODULE_MAX_LENGTH
from cache_server.api.access import NO_NAMESPACE, Scope, declare
from cache_server.api.deps import GraphsDep
from cache_server.api.graph_schemas import (
    GraphReportOut,
    GraphsOut,
    GraphVariantsOut,
    StepOut,
    UnparseableOut,
)
from cache_server.auth.tokens import Role
from cache_server.graphs.report import (
    DEFAULT_VARIANTS_READ,
    MAX_TOP,
    MAX_VARIANTS_READ,
    VARIANTS_READ_PER_REPORT,
    GraphReports,
    NamespaceReport,
)

__all__ = ["router"]

router = APIRouter(tags=["admin"])

GRAPHS_BUSY = "graphs_busy: the server builds XLA_CACHE_GRAPH_REPORTS_AT_ONCE reports already (Retry-After)"

NAMESPACE = Query(min_length=1, max_length=128, description="The namespace whose graphs are reported.")
TOP = Query(
    ge=1,
    le=MAX_TOP,
    description="How many graphs: those that cost most to compile (compile seconds paid, then compiles).",
)
MODULE = Query(max_length=MODULE_MAX_LENGTH, description="Only this graph (HLO module).")
VARIANTS = Query(
    ge=1,
    le=MAX_VARIANTS_READ,
    description=(
        f"Most variants read and analysed per graph; {VARIANTS_READ_PER_REPORT:,} in all (or this, if more)."
    ),
)


VARIANTS_PAGE_MAX = 1_000  # variants one page of /admin/graphs/variants holds at most
AFTER = Query(max_length=64, description="The cursor: the previous page's next (a variant's signature).")
LIMIT = Query(ge=1, le=VARIANTS_PAGE_MAX, description="Most variants in this page.")
NO_GRAPH = "The namespace has never been registered, or holds no parsed graph of this module (named)"


def _graphs_out(reports: GraphReports, namespace: str, found: NamespaceReport) -> GraphsOut:
    return GraphsOut(
        namespace=namespace,
        steps=[StepOut.of(s) for s in found.steps],
        graphs=[GraphReportOut.of(r) for r in found.graphs],
        unparseable=[UnparseableOut(reason=r, entries=n) for r, n in reports.unparseable(namespace)],
        **dict(zip(("prefilled_entries", "prefilled_unverified"), reports.prefilled(namespace), strict=True)),
    )


@router.get("/admin/graphs", response_model=GraphsOut)
@declare(Role.READ, Scope.QUERY_NAMESPACE, answers={"404": NO_NAMESPACE, "503": GRAPHS_BUSY})
def graphs(
    reports: GraphsDep,
    namespace: Annotated[str, NAMESPACE],
    top: Annotated[int, TOP] = 10,
    variants: Annotated[int, VARIANTS] = DEFAULT_VARIANTS_READ,
    module: Annotated[str | None, MODULE] = None,
) -> GraphsOut:
    """The ``top`` graphs of ``namespace`` that cost most to compile (compile seconds paid, then compiles; or
    the one ``module``, as a run's detail links it), grouped into ``steps``: for each, the parameter
    dimensions that vary (their sizes: count, min, max, the smallest few) with the ways to pad each alone (as
    is, next power of two, next multiple of 8, 64 or 128, the best 2, 4 or 8 bucket boundaries for the sizes
    seen, the maximum), the best combinations of those (``frontier``: fewest compilations for a padding
    budget), and each rounding applied to all at once (``schemes``); overheads in bytes of the padded
    parameters (and of the results, where their sizes follow the varying dimensions). When no dimension
    varies, ``unchanged`` says why no padding is offered. At most ``variants`` variants of each graph are
    read, and :data:`~cache_server.graphs.report.VARIANTS_READ_PER_REPORT` in all (or ``variants``, if more),
    shared among the graphs (``read`` says how many were); where a graph's entries repeat input shapes, its
    latest bodies are compared for the sizes baked into it, within a bound per graph and per report
    (``bodies_read`` of ``bodies_stored``). 404 for an unknown namespace; 503 (with Retry-After) when the
    server builds ``XLA_CACHE_GRAPH_REPORTS_AT_ONCE`` reports already and none ends within
    ``XLA_CACHE_GRAPH_REPORT_WAIT_SECONDS``."""
    found = reports.namespace_report(namespace, top=top, per_graph=variants, module=module)
    return _graphs_out(reports, namespace, found)


@router.get("/dashboard/graphs", response_model=GraphsOut, include_in_schema=False)
@declare(Role.READ, Scope.QUERY_NAMESPACE, answers={"503": GRAPHS_BUSY})
def dashboard_graphs(
    reports: GraphsDep,
    namespace: Annotated[str, NAMESPACE],
    top: Annotated[int, TOP] = 5,
    module: Annotated[str | None, MODULE] = None,
) -> GraphsOut:
    """What the dashboard's graph view draws (``GET /admin/graphs``, for the read role)."""
    found = reports.namespace_report(namespace, top=top, module=module)
    return _graphs_out(reports, namespace, found)


@router.get("/admin/graphs/variants", response_model=GraphVariantsOut)
@declare(Role.READ, Scope.QUERY_NAMESPACE, answers={"404": NO_GRAPH})
def graph_variants(
    reports: GraphsDep,
    namespace: Annotated[str, NAMESPACE],
    module: Annotated[str | None, MODULE] = None,
    after: Annotated[str | None, AFTER] = None,
    limit: Annotated[int, LIMIT] = 500,
) -> GraphVariantsOut:
    """The shape variants of one graph (``module``) of ``namespace``, a page at a time in signature order
    (``after``: the previous page's ``next``), each with its shapes text and its parameters parsed (element
    type and dimensions): what ``xla-cache prefill --from NAMESPACE`` compiles. With no ``module``: the
    namespace's graphs (the costliest first), to choose one. 404 for an unknown namespace, or a module it
    holds no parsed graph of (the message names its graphs)."""
    return GraphVariantsOut.of(namespace, reports.variants(namespace, module, after=after, limit=limit))
