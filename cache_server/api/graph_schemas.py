"""Bodies of the bucketing report's routes (``GET /admin/graphs``, ``/dashboard/graphs``): a namespace's
graphs, the steps they make up, each graph's varying dimensions and baked sizes with what padding them leaves,
built from :mod:`cache_server.graphs.report`'s reports."""

from __future__ import annotations

from pydantic import BaseModel, Field

from cache_server.graphs.axes import VALUES_SHOWN, AxisChoice, Combination
from cache_server.graphs.report import (
    BODIES_READ_PER_GRAPH,
    BODY_TEXT_PER_GRAPH,
    BODY_TEXT_PER_REPORT,
    SOURCES_READ,
    BakedReport,
    GraphReport,
    StepReport,
    VariantsPage,
    baked_summary,
)

__all__ = [
    "BakedSizesOut",
    "ChoiceOut",
    "CombinationOut",
    "GraphReportOut",
    "GraphVariantsOut",
    "GraphsOut",
    "InternalSizeOut",
    "SchemeOut",
    "SourceOut",
    "StepOut",
    "UnparseableOut",
    "VaryingDimensionOut",
]


class ChoiceOut(BaseModel):
    name: str = Field(description="as is, pow2, mult8, mult64, mult128, buckets2/4/8 or max.")
    description: str
    sizes: int = Field(description="Distinct sizes left on this dimension.")
    compiles: int = Field(description="Compilations left with only this dimension padded this way.")
    boundaries: list[int] = Field(
        description="The sizes padded to (bucket tops; the maximum); [] for roundings."
    )
    mean_overhead: float = Field(
        description="Mean over the variants of extra bytes / real bytes of the padded parameters "
        "(0.25: a quarter more bytes)."
    )
    max_overhead: float
    result_mean_overhead: float | None = Field(
        description="The same in bytes of the results, padded with the parameters (see result_cost); null "
        "when the results' sizes could not be tied to the varying dimensions."
    )
    result_max_overhead: float | None

    @classmethod
    def of(cls, choice: AxisChoice) -> ChoiceOut:
        return cls(
            name=choice.name,
            description=choice.description,
            sizes=choice.sizes,
            compiles=choice.compiles,
            boundaries=list(choice.boundaries),
            mean_overhead=choice.mean_overhead,
            max_overhead=choice.max_overhead,
            result_mean_overhead=choice.also_mean_overhead,
            result_max_overhead=choice.also_max_overhead,
        )


class VaryingDimensionOut(BaseModel):
    label: str = Field(description="p<parameter>.d<dimension>, both from 0.")
    param: int
    dim: int
    count: int = Field(description="Distinct sizes it took across the variants read.")
    min: int
    max: int
    values: list[int] = Field(description=f"The smallest {VALUES_SHOWN} of those sizes, ascending.")
    choices: list[ChoiceOut] = Field(description="Ways to pad this dimension alone ('as is' first).")


class CombinationOut(BaseModel):
    choices: dict[str, str] = Field(
        description="Each varying dimension's label and the choice applied to it."
    )
    description: str = Field(description="The same in words: 'p0.d0 mult64, p1.d0 as is', 'all max'.")
    compiles: int = Field(description="Compilations left (other layouts and result-only variants included).")
    mean_overhead: float = Field(description="As for a choice: extra bytes of the padded parameters, mean.")
    max_overhead: float
    result_mean_overhead: float | None = Field(description="As for a choice: in bytes of the results.")
    result_max_overhead: float | None

    @classmethod
    def of(cls, combination: Combination, labels: list[str]) -> CombinationOut:
        return cls(
            choices=dict(zip(labels, combination.choices, strict=True)),
            description=combination.describe(labels),
            compiles=combination.compiles,
            mean_overhead=combination.mean_overhead,
            max_overhead=combination.max_overhead,
            result_mean_overhead=combination.also_mean_overhead,
            result_max_overhead=combination.also_max_overhead,
        )


class InternalSizeOut(BaseModel):
    label: str = Field(
        description="The op, attribute and dimension, with op name and source: "
        "'slice.0 limit[0] (jit(step)/slice, train/step.py:9)'."
    )
    op: str = Field(description="The instruction's name in the HLO (slice.0).")
    opcode: str
    op_name: str | None = Field(description="From the op's metadata (jit(step)/slice, xla__select).")
    source: str | None = Field(description="file:line from the op's metadata, where the module has it.")
    attribute: str = Field(description="limit, high, shape, sizes, slice_sizes, value, ...")
    index: int = Field(description="The dimension (or literal element) of the attribute.")
    count: int
    min: int
    max: int
    values: list[int] = Field(description=f"The smallest {VALUES_SHOWN} sizes it took, ascending.")
    folded: int = Field(
        description="Other varying sizes that follow from this one (a pad's width, the "
        "broadcast after a slice), left out of the analysis."
    )
    choices: list[ChoiceOut] = Field(description="Ways to pad this size alone (bytes: see cost).")


class BakedSizesOut(BaseModel):
    """Sizes baked into the graph: entries at one input shape that differ only in sizes inside it."""

    params: str = Field(description="The parameters of the entries compared.")
    entries: int = Field(
        description="Entries compared: those of the graph's bodies read (see bodies_read) with these "
        "parameters and the commonest structure."
    )
    cost: str = Field(description="What the overheads measure.")
    summary: str = Field(
        description="What to do and what it leaves, in one line: 'pad all 16 sizes to their maximum: 1 "
        "compile instead of 61, +28% mean bytes of ...; or pass them as data (...)' (the frontier's first "
        "and last lines)."
    )
    sizes: list[InternalSizeOut]
    frontier: list[CombinationOut] = Field(
        description="The best trades of compilations against padding of these sizes; the first all to "
        "their maximum (one compilation), the last as they are."
    )

    @classmethod
    def of(cls, baked: BakedReport) -> BakedSizesOut:
        group, analysis = baked.group, baked.analysis
        labels = [axis.label for axis in group.axes]
        return cls(
            params=group.params,
            entries=group.entries,
            cost=analysis.cost,
            summary=baked_summary(baked),
            sizes=[
                InternalSizeOut(
                    label=axis.label,
                    op=axis.op.name,
                    opcode=axis.op.opcode,
                    op_name=axis.op.op,
                    source=axis.op.source,
                    attribute=axis.attribute,
                    index=axis.index,
                    count=len(axis.values),
                    min=axis.values[0],
                    max=axis.values[-1],
                    values=list(axis.values[:VALUES_SHOWN]),
                    folded=axis.folded,
                    choices=[ChoiceOut.of(c) for c in report.choices],
                )
                for axis, report in zip(group.axes, analysis.axes, strict=True)
            ],
            frontier=[CombinationOut.of(c, labels) for c in analysis.frontier],
        )


class SchemeOut(BaseModel):
    scheme: str = Field(description="pow2, mult8, mult64 or mult128.")
    description: str
    variants: int = Field(description="Compilations left with every varying dimension padded this way.")
    mean_overhead: float = Field(
        description="Mean over the variants of extra bytes / real bytes of the parameters that have "
        "a varying dimension (0.25: a quarter more bytes)."
    )
    max_overhead: float


class SourceOut(BaseModel):
    source: str = Field(description="file:line, the file as its last two path parts.")
    entries: int = Field(description="Entries of the graph its runs compiled there.")


class GraphReportOut(BaseModel):
    module: str = Field(description="The HLO module name.")
    variants: int = Field(description="Distinct shape signatures among its entries.")
    entries: int
    compile_seconds: float = Field(
        description="Compile seconds paid for it: the compile times recorded with its entries, summed "
        "(the report's order, then entries)."
    )
    summary: str | None = Field(
        default=None,
        description="What to do about its compiles and what it leaves, in one line (the sizes baked into "
        "it, then its input dimensions: the frontiers' fewest compiles); null where padding merges nothing.",
    )
    source: str | None = Field(
        default=None, description="file:line its latest body read was traced at, where the module names one."
    )
    read: int = Field(description="Variants read and analysed (fewer than variants when capped).")
    other_layouts: int = Field(
        description="Variants read that differ from the common one in more than sizes (parameter count, "
        "element type or rank): not compared, each left as one compilation."
    )
    result_only: int = Field(
        description="Variants read whose parameters repeat another's, with another result: padding the "
        "parameters cannot merge them, each left as one compilation."
    )
    example: str | None = Field(description="One variant's shapes.")
    unchanged: str | None = Field(
        description="When no parameter dimension varies: why padding cannot merge the variants, and what "
        "differs instead (no choice, combination or scheme is then offered)."
    )
    cost: str | None = Field(description="What the overheads measure: 'bytes of the padded parameters'.")
    result_cost: str | None = Field(
        description="What the result_* overheads measure, 'bytes of the padded results', where every result "
        "dimension is a constant plus a sum of varying dimensions in all the variants read (so it pads with "
        "them); else null."
    )
    weights: str | None = Field(
        description="How the variants are weighted in the means and the best boundaries: "
        '"its entries\' hits + 1 per variant".'
    )
    varying: list[VaryingDimensionOut]
    frontier: list[CombinationOut] = Field(
        description="The best trades of compilations against padding, combining one choice per dimension: "
        "fewest compilations first (all to the maximum), the last the variants as they are (at most 6)."
    )
    schemes: list[SchemeOut] = Field(description="One rounding applied to every varying dimension at once.")
    baked_sizes: BakedSizesOut | None = Field(
        default=None,
        description="Where entries repeat an input shape with other sizes inside the graph (a step that "
        "slices or pads by Python integers): those sizes, their values and what padding them leaves.",
    )
    bodies_read: int = Field(
        default=0,
        description=f"Bodies (sized ops) read and compared for baked_sizes, the latest first: at most "
        f"{BODIES_READ_PER_GRAPH} of a graph and {BODY_TEXT_PER_GRAPH // 2**20} MiB of their text, "
        f"{BODY_TEXT_PER_REPORT // 2**20} MiB in all of a report's graphs (so the last graphs of a large "
        "report may read none).",
    )
    sources: list[SourceOut] = Field(
        default_factory=list,
        description="Where the jobs compiled it: the file:line its runs reported with its compiles "
        "(torch_xla: the call site of the mark_step/sync that compiled it, no debug setting needed), the "
        "most entries first, at most 3; counted over sources_counted of its entries.",
    )
    sources_counted: int = Field(
        default=0,
        description=f"How many of its entries the sources were counted over: all of them up to "
        f"{SOURCES_READ:,}, else that many (the counts then describe a sample).",
    )
    bodies_stored: int | None = Field(
        default=None,
        description="The graph's entries with a body; null when its entries repeat no input shape (no body "
        "is read). More than bodies_read: baked_sizes describes the latest of them.",
    )

    @classmethod
    def of(cls, report: GraphReport) -> GraphReportOut:
        bucketing = report.bucketing
        axes = bucketing.axes
        labels = [v.label for v in bucketing.varying]
        choices = [list(axis.choices) for axis in axes.axes] if axes else [[] for _ in labels]
        return cls(
            module=report.module,
            variants=report.variants,
            entries=report.entries,
            compile_seconds=report.compile_seconds,
            summary=report.summary,
            source=report.source,
            read=report.read,
            other_layouts=bucketing.other_layouts,
            result_only=bucketing.result_only,
            example=report.example,
            unchanged=bucketing.unchanged,
            cost=axes.cost if axes else None,
            result_cost=axes.also_cost if axes else None,
            weights=axes.weights if axes else None,
            varying=[
                VaryingDimensionOut(
                    label=v.label,
                    **{**vars(v), "values": list(v.values)},
                    choices=[ChoiceOut.of(c) for c in found],
                )
                for v, found in zip(bucketing.varying, choices, strict=True)
            ],
            frontier=[CombinationOut.of(c, labels) for c in (axes.frontier if axes else ())],
            schemes=[SchemeOut(**vars(s)) for s in bucketing.schemes],
            baked_sizes=BakedSizesOut.of(report.baked) if report.baked is not None else None,
            bodies_read=report.bodies_read,
            bodies_stored=report.bodies_stored,
            sources=[SourceOut(source=source, entries=n) for source, n in report.sources],
            sources_counted=report.sources_counted,
        )


class StepOut(BaseModel):
    """Graphs one step of the job produced: modules that share an input shape and differ only by ops an
    edge size adds or drops (or not at all)."""

    modules: list[str] = Field(description="Its graphs (HLO modules), the costliest first.")
    compiles: int = Field(description="Its modules' entries, each one compile paid.")
    compile_seconds: float = Field(description="The compile times recorded with them, summed.")
    variants: int = Field(description="Its modules' distinct shape signatures, summed.")
    varies: list[str] = Field(
        description="What varies across its compiles, in words: its modules (the op an edge size adds or "
        "drops), the sizes baked into its graphs, their input dimensions."
    )
    fix: str | None = Field(description="What to do and what it leaves: its costliest module's summary.")

    @classmethod
    def of(cls, found: StepReport) -> StepOut:
        return cls(
            modules=list(found.step.modules),
            compiles=found.step.compiles,
            compile_seconds=round(found.step.compile_seconds, 3),
            variants=sum(g.variants for g in found.graphs),
            varies=list(found.varies),
            fix=found.fix,
        )


class UnparseableOut(BaseModel):
    reason: str = Field(description="Why these entries hold no graph the parser reads.")
    entries: int


class GraphsOut(BaseModel):
    namespace: str
    steps: list[StepOut] = Field(
        default_factory=list,
        description="The graphs listed as the steps of the job that produced them, the costliest first "
        "(compile seconds paid, then compiles): a step cut into several modules by sizes that add or drop "
        "an op is one step.",
    )
    graphs: list[GraphReportOut] = Field(
        description="The graphs that cost most to compile first (compile seconds paid, then compiles)."
    )
    unparseable: list[UnparseableOut] = Field(
        default_factory=list,
        description="Entries of the namespace with no graph, by reason, the commonest five first: bytes that "
        "are no executable the parser reads, or an entry that broke one of its bounds (see docs/operating).",
    )
    prefilled_entries: int = Field(
        default=0, description="Entries of the namespace a prefill stored (compiled ahead of the target job)."
    )
    prefilled_unverified: int = Field(
        default=0,
        description="Of those, the entries published without a real run of the namespace to compare with.",
    )


class ParameterOut(BaseModel):
    element: str = Field(description="XLA's element type: f32, bf16, s32, pred ...")
    dims: list[int] = Field(description="The dimensions (a dynamic dimension's bound counts as its size).")
    dynamic: bool = Field(default=False, description="Some dimension is dynamic (bounded: <=N).")


class VariantOut(BaseModel):
    signature: str = Field(description="The digest of the shapes the variants are ordered by (the cursor).")
    shapes: str = Field(description="The shapes text: (f32[16,3], s32[8]) -> (f32[16])")
    params: list[ParameterOut] | None = Field(
        description="The parameters in order (a tuple parameter's arrays flattened); null when the text is "
        "not of the parsed form."
    )


class GraphCountOut(BaseModel):
    module: str
    variants: int = Field(description="Distinct shape signatures.")
    entries: int


class GraphVariantsOut(BaseModel):
    namespace: str
    module: str | None = Field(description="The graph whose variants these are; null when none was asked.")
    graphs: list[GraphCountOut] = Field(
        default_factory=list,
        description="With no module asked: the namespace's graphs to choose from, the costliest first.",
    )
    variants: list[VariantOut] = Field(default_factory=list)
    next: str | None = Field(
        default=None, description="Pass as after= for the next page; null after the last page."
    )

    @classmethod
    def of(cls, namespace: str, page: VariantsPage) -> GraphVariantsOut:
        return cls(
            namespace=namespace,
            module=page.module,
            graphs=[
                GraphCountOut(module=g.module, variants=g.variants, entries=g.entries) for g in page.graphs
            ],
            variants=[
                VariantOut(
                    signature=v.signature,
                    shapes=v.shapes,
                    params=None
                    if v.parsed is None
                    else [
                        ParameterOut(element=p.element, dims=list(p.dims), dynamic=any(p.dynamic))
                        for p in v.parsed.params
                    ],
                )
                for v in page.variants
            ],
            next=page.next,
        )
