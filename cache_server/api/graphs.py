"""The bucketing report over HTTP: which dimensions of a namespace's graphs vary, and what padding them
would save (``GET /admin/graphs``; the dashboard's graph view reads the same at ``/dashboard/graphs``).

Role as for the stats (admin); a token limited to namespace patterns (read or write) may ask for a
namespace it covers (:data:`cache_server.api.auth.NAMESPACE_QUERY_ROUTES`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from cache_server.api.deps import GraphsDep
from cache_server.graphs.bucketing import VALUES_SHOWN
from cache_server.graphs.report import (
    DEFAULT_VARIANTS_READ,
    MAX_TOP,
    MAX_VARIANTS_READ,
    VARIANTS_READ_PER_REPORT,
    GraphReport,
)

__all__ = ["GraphsOut", "router"]

router = APIRouter(tags=["admin"])

NAMESPACE = Query(min_length=1, max_length=128, description="The namespace whose graphs are reported.")
TOP = Query(ge=1, le=MAX_TOP, description="How many graphs: those with the most shape variants.")
VARIANTS = Query(
    ge=1,
    le=MAX_VARIANTS_READ,
    description=(
        f"Most variants read and analysed per graph; {VARIANTS_READ_PER_REPORT:,} in all (or this, if more)."
    ),
)


class DimensionOut(BaseModel):
    label: str = Field(description="p<parameter>.d<dimension>, both from 0.")
    param: int
    dim: int
    count: int = Field(description="Distinct sizes it took across the variants read.")
    min: int
    max: int
    values: list[int] = Field(description=f"The smallest {VALUES_SHOWN} of those sizes, ascending.")


class SchemeOut(BaseModel):
    scheme: str = Field(description="pow2, mult8, mult64 or mult128.")
    description: str
    variants: int = Field(description="Compilations left with every varying dimension padded this way.")
    mean_overhead: float = Field(
        description="Mean over the variants of extra elements / real elements of the parameters that have "
        "a varying dimension (0.25: a quarter more elements computed)."
    )
    max_overhead: float


class GraphReportOut(BaseModel):
    module: str = Field(description="The HLO module name.")
    variants: int = Field(description="Distinct shape signatures among its entries.")
    entries: int
    read: int = Field(description="Variants read and analysed (fewer than variants when capped).")
    other_layouts: int = Field(
        description="Variants read that differ from the common one in more than sizes (parameter count, "
        "element type or rank): not compared, each left as one compilation."
    )
    example: str | None = Field(description="One variant's shapes.")
    varying: list[DimensionOut]
    schemes: list[SchemeOut]

    @classmethod
    def of(cls, report: GraphReport) -> GraphReportOut:
        bucketing = report.bucketing
        return cls(
            module=report.module,
            variants=report.variants,
            entries=report.entries,
            read=report.read,
            other_layouts=bucketing.other_layouts,
            example=report.example,
            varying=[
                DimensionOut(label=v.label, **{**vars(v), "values": list(v.values)})
                for v in bucketing.varying
            ],
            schemes=[SchemeOut(**vars(s)) for s in bucketing.schemes],
        )


class GraphsOut(BaseModel):
    namespace: str
    graphs: list[GraphReportOut] = Field(description="Graphs with the most shape variants first.")


@router.get("/admin/graphs", response_model=GraphsOut)
def graphs(
    reports: GraphsDep,
    namespace: Annotated[str, NAMESPACE],
    top: Annotated[int, TOP] = 10,
    variants: Annotated[int, VARIANTS] = DEFAULT_VARIANTS_READ,
) -> GraphsOut:
    """The ``top`` graphs of ``namespace`` with the most shape variants: for each, the parameter
    dimensions that vary (their sizes: count, min, max, the smallest few), and for each padding scheme
    (next power of two; next multiple of 8, 64, 128) the compilations it would leave and its mean padding
    overhead. At most ``variants`` variants of each graph are read, and
    :data:`~cache_server.graphs.report.VARIANTS_READ_PER_REPORT` in all (or ``variants``, if more), shared
    among the graphs (``read`` says how many were). 404 for an unknown namespace."""
    return GraphsOut(
        namespace=namespace,
        graphs=[GraphReportOut.of(r) for r in reports.report(namespace, top=top, per_graph=variants)],
    )


@router.get("/dashboard/graphs", response_model=GraphsOut, include_in_schema=False)
def dashboard_graphs(
    reports: GraphsDep,
    namespace: Annotated[str, NAMESPACE],
    top: Annotated[int, TOP] = 5,
) -> GraphsOut:
    """What the dashboard's graph view draws (``GET /admin/graphs``, for the read role)."""
    return GraphsOut(
        namespace=namespace, graphs=[GraphReportOut.of(r) for r in reports.report(namespace, top=top)]
    )
