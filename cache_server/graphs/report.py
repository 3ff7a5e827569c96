"""The bucketing report of a namespace: its graphs that cost most to compile (compile seconds paid, then
compiles), each analysed by :func:`~cache_server.graphs.bucketing.analyse` (which dimensions vary, what
each padding scheme leaves);
and where a graph's entries repeat its input shapes (sizes baked into the graph: a step that slices or
pads by Python integers), the sizes that vary inside it (:func:`~cache_server.graphs.baked.baked_group`)
analysed the same way (:func:`~cache_server.graphs.bucketing.analyse_axes`).

:class:`GraphReports` is the one door to it: ``GET /admin/graphs`` and the dashboard's graph view ask it,
and it reads the index through :class:`~cache_server.index.graph_variants.GraphVariantsRepository`.

A report costs what it answers, whatever was uploaded (issue 42): a read token may ask for ``top=100`` graphs
of 250 entries whose bodies each hold 64 KiB of sized ops, and parsing one such body costs 5 to 15 ms of CPU
and 0.5 MiB. So the bodies compared are bounded per graph (the latest :data:`BODIES_READ_PER_GRAPH`, at most
:data:`BODY_TEXT_PER_GRAPH` characters of ops text and :data:`OPS_COMPARED_PER_GRAPH` ops) and per report
(:data:`BODY_TEXT_PER_REPORT`, :data:`OPS_COMPARED_PER_REPORT`), each graph saying how many it compared of
how many are stored; and the reports built at once are bounded per server, all its processes together
(:data:`GRAPH_REPORT_SLOTS`, ``graph_reports_at_once``): past them a report waits a moment, then
:class:`~cache_server.errors.GraphsBusy`.
"""

from __future__ import annotations

from dataclasses import dataclass

from cache_server.background.slots import ServerSlots, SlotsBusy
from cache_server.errors import GraphNotFound, GraphsBusy, NamespaceNotFound
from cache_server.graphs.axes import AxesReport, Point, analyse_axes
from cache_server.graphs.baked import BakedGroup, baked_group_of
from cache_server.graphs.bucketing import BucketingReport, analyse
from cache_server.graphs.shapes import ShapeSignature, parse_shape_signature
from cache_server.graphs.steps import Step, StepGraph, group_steps
from cache_server.index.graph_variants import (
    SOURCES_READ,
    GraphBody,
    GraphCounted,
    GraphVariantsRepository,
)
from cache_server.names import check_namespace
from cache_server.parsing.body import Body, body_from_text
from cache_server.parsing.hlo import CUT_MARKER

__all__ = [
    "BAKED_COST",
    "BODIES_READ_PER_GRAPH",
    "BODY_TEXT_PER_GRAPH",
    "BODY_TEXT_PER_REPORT",
    "DEFAULT_VARIANTS_READ",
    "FIX_DOC",
    "GRAPH_REPORT_SLOTS",
    "MAX_TOP",
    "MAX_VARIANTS_READ",
    "OPS_COMPARED_PER_GRAPH",
    "OPS_COMPARED_PER_REPORT",
    "SOURCES_READ",
    "VARIANTS_READ_PER_REPORT",
    "BakedReport",
    "GraphReport",
    "GraphReports",
    "NamespaceReport",
    "StepReport",
    "Variant",
    "VariantsPage",
    "baked_summary",
    "graph_summary",
    "shares",
]

MAX_TOP = 100  # graphs one report may list
MAX_VARIANTS_READ = 5_000  # variants one report may read per graph
DEFAULT_VARIANTS_READ = 2_500  # the seed workload's fuse graph (2,112 shapes at seq 128) is read whole
# Variants one report reads in all (or ``per_graph``, if more): reading, parsing and analysing cost ~30 us of
# CPU per variant, so ten graphs of 10,000 variants read 2,000 each took most of a second. Shared by
# :func:`shares`. 3,000 (was 4,000 before a report also compared bodies, grouped steps and counted sources:
# ~40 ms of the 250 ms a report of a namespace of 500,000 entries may take); a seed-like namespace's top 10
# (its fuse graph's 2,112 shapes, its step's modules, graphs of 100) is still read whole.
VARIANTS_READ_PER_REPORT = 3_000
# Bodies read for a graph's baked sizes (only where its entries repeat input shapes), the latest first: at
# most this many, of at most this many characters of ops text in all (32 bodies of the 64 KiB an entry's may
# hold; 64 of a real module's few KB), and parsed only until this many sized ops are compared (~0.2 s of CPU).
BODIES_READ_PER_GRAPH = 64
BODY_TEXT_PER_GRAPH = 2 * 1024 * 1024
OPS_COMPARED_PER_GRAPH = 32_000
# The same for one report in all, however many graphs it lists: two graphs' worth (under a second of CPU).
BODY_TEXT_PER_REPORT = 4 * 1024 * 1024
OPS_COMPARED_PER_REPORT = 64_000
GRAPH_REPORT_SLOTS = "graph-reports"  # the server's slots for reports (ServerSlots' name)
BAKED_COST = "bytes of the results of the ops whose sizes pad"
# Characters of shapes text one graph's report analyses (an entry's is at most hlo.MAX_SHAPES_TEXT): variants
# past it are not read, so a namespace of crafted entries costs no more than this per graph.
MAX_GRAPH_SHAPES_TEXT = 2 * 1024 * 1024
FIX_DOC = "docs/fixing-baked-sizes.md shows how"  # where passing sizes as data is shown
MAX_EXAMPLE_TEXT = 4 * 1024  # characters of a report's example shapes; past that cut with CUT_MARKER


def _within_budget(shapes: list[str], hits: list[int]) -> tuple[list[str], list[int]]:
    """The first variants whose shapes text fits :data:`MAX_GRAPH_SHAPES_TEXT` in all."""
    left = MAX_GRAPH_SHAPES_TEXT
    for count, text in enumerate(shapes):
        left -= len(text)
        if left < 0:
            return shapes[:count], hits[:count]
    return shapes, hits


def _example(shapes: list[str]) -> str | None:
    if not shapes:
        return None
    text = shapes[0]
    return text if len(text) <= MAX_EXAMPLE_TEXT else text[:MAX_EXAMPLE_TEXT] + CUT_MARKER


def shares(variants: list[int], *, per_graph: int, total: int) -> list[int]:
    """How many variants to read of each graph (``variants``: how many each has): at most ``per_graph`` of
    one, at most ``max(total, per_graph)`` in all, shared evenly, what a graph with fewer than its share
    leaves going to the others (so a namespace whose graphs fit is read whole)."""
    left = max(total, per_graph)
    read = [0] * len(variants)
    by_size = sorted(range(len(variants)), key=variants.__getitem__)
    for place, index in enumerate(by_size):
        read[index] = min(variants[index], per_graph, left // (len(variants) - place))
        left -= read[index]
    return read


@dataclass(frozen=True)
class GraphReport:
    """One graph's bucketing report: its variants and entries in the namespace, how many of its variants
    were read and analysed (``read``; fewer than ``variants`` when capped, then ``bucketing`` describes
    that sample), an example shape, and the analysis; where its entries repeat input shapes, the sizes baked
    into it, from ``bodies_read`` of its ``bodies_stored`` bodies (None: not looked for)."""

    module: str
    variants: int
    entries: int
    read: int
    example: str | None
    bucketing: BucketingReport
    baked: BakedReport | None = None
    bodies_read: int = 0
    bodies_stored: int | None = None
    compile_seconds: float = 0.0  # the compile times recorded with its entries, summed: the report's order
    sources: tuple[tuple[str, int], ...] = ()  # where its runs compiled it (file:line, entries), most first
    sources_counted: int = 0  # of how many of its entries the sources were counted (SOURCES_READ at most)
    source: str | None = None  # where its latest body read was traced (file:line), where it names one
    summary: str | None = None  # what to do and what it leaves (graph_summary), before the tables


@dataclass(frozen=True)
class BakedReport:
    """The sizes baked into one graph at one input shape (``group``: which entries, the varying sizes and
    each entry's point) and what padding them would leave (``analysis``, by :data:`BAKED_COST`)."""

    group: BakedGroup
    analysis: AxesReport


def baked_report(group: BakedGroup) -> BakedReport:
    """``group``'s sizes analysed as axes: each entry weighs 1, a point costs the bytes of the results of
    the ops whose sizes vary, at those sizes."""
    axes = group.axes

    def cost(sizes: tuple[int, ...]) -> float:
        return float(sum(axis.bytes_at(size) for axis, size in zip(axes, sizes, strict=True)))

    analysis = analyse_axes(
        [axis.label for axis in axes],
        [Point(point) for point in group.points],
        cost,
        cost_label=BAKED_COST,
        weights_label="1 per entry",
    )
    return BakedReport(group, analysis)


def _percent(ratio: float) -> str:
    """``+3.3%``, ``+41%``: a tenth of a percent below 10 %."""
    return f"+{ratio:.1%}" if ratio < 0.1 else f"+{ratio:.0%}"


def _compiles(count: int) -> str:
    return f"{count:,} compile" + ("" if count == 1 else "s")


def baked_summary(baked: BakedReport) -> str:
    """What to do about the sizes baked into a graph and what it leaves, in one line: ``pad all 16 sizes
    to their maximum: 1 compile instead of 61, +28% mean bytes of ...; or pass them as data (...)``. The
    counts are the frontier's: its fewest compiles against the entries' as they are."""
    group, analysis = baked.group, baked.analysis
    sizes = sum(1 + axis.folded for axis in group.axes)
    first, last = analysis.frontier[0], analysis.frontier[-1]
    if all(choice == "max" for choice in first.choices):
        how = "pad the size to its maximum" if sizes == 1 else f"pad all {sizes} sizes to their maximum"
    else:
        how = "pad " + first.describe([axis.label for axis in group.axes])
    return (
        f"{how}: {_compiles(first.compiles)} instead of {last.compiles:,}, {_percent(first.mean_overhead)} "
        f"mean {analysis.cost}; or pass them as data ({FIX_DOC})"
    )


def _inputs_summary(bucketing: BucketingReport) -> str | None:
    """The same for the graph's varying input dimensions (its frontier's fewest compiles)."""
    axes = bucketing.axes
    if axes is None or not axes.frontier or not bucketing.varying:
        return None
    first, last = axes.frontier[0], axes.frontier[-1]
    if first.compiles >= last.compiles:
        return None
    labels = [v.label for v in bucketing.varying]
    if all(choice == "max" for choice in first.choices):
        how = "pad every varying input dimension to its maximum"
    else:
        how = "pad the inputs " + first.describe(labels)
    return (
        f"{how}: {_compiles(first.compiles)} instead of {last.compiles:,}, {_percent(first.mean_overhead)} "
        f"mean {axes.cost}"
    )


def graph_summary(bucketing: BucketingReport, baked: BakedReport | None) -> str | None:
    """What to do about one graph's compiles and what it leaves (the sizes baked into it first, then its
    input dimensions), or None where padding would merge nothing."""
    parts = [baked_summary(baked)] if baked is not None and baked.analysis.frontier else []
    inputs = _inputs_summary(bucketing)
    if inputs is not None:
        parts.append(inputs)
    return "; and ".join(parts) if parts else None


@dataclass(frozen=True)
class StepReport:
    """One step of the job (:mod:`~cache_server.graphs.steps`): its modules' reports (the costliest
    first), what it paid, what varies (in words) and what to do (the costliest module's summary)."""

    step: Step
    graphs: tuple[GraphReport, ...]
    varies: tuple[str, ...]
    fix: str | None


@dataclass(frozen=True)
class NamespaceReport:
    """A report: the graphs (the costliest first) and the steps they make up (the costliest first)."""

    graphs: list[GraphReport]
    steps: list[StepReport]


@dataclass(frozen=True)
class Variant:
    """One shape variant of a graph: its signature (the digest the index orders by), its shapes text and
    that text parsed (None where it is not of the parsed form)."""

    signature: str
    shapes: str
    parsed: ShapeSignature | None


@dataclass(frozen=True)
class VariantsPage:
    """A page of one graph's variants (``module``), or, with no module asked, the namespace's graphs to
    choose from (``graphs``: the costliest :data:`MAX_TOP`); ``next`` is the cursor of the next page (the
    last signature read), None after the last."""

    module: str | None
    graphs: list[GraphCounted]
    variants: list[Variant]
    next: str | None


def _varies(step: Step, graphs: list[GraphReport]) -> tuple[str, ...]:
    """What varies across a step's compiles, in words: its modules (and the op an edge size adds or drops),
    the sizes baked into its graphs, their input dimensions."""
    found: list[str] = []
    if len(graphs) > 1:
        found.append(f"{len(graphs)} modules: {step.why}")
    baked = next((g.baked for g in graphs if g.baked is not None), None)
    if baked is not None:
        axes = baked.group.axes
        sizes = sum(1 + axis.folded for axis in axes)
        named = ", ".join(axis.label for axis in axes[:3]) + (", …" if len(axes) > 3 else "")
        found.append(f"{sizes} size{'' if sizes == 1 else 's'} inside the graph: {named}")
    labels = list(dict.fromkeys(v.label for g in graphs for v in g.bucketing.varying))
    if labels:
        found.append("input dimensions " + ", ".join(labels))
    return tuple(found)


@dataclass
class _BodyBudget:
    """What one report may still read (characters of ops text) and compare (sized ops) of bodies."""

    text: int = BODY_TEXT_PER_REPORT
    ops: int = OPS_COMPARED_PER_REPORT


def _parsed(rows: list[GraphBody], max_ops: int) -> tuple[list[tuple[GraphBody, Body]], int]:
    """``rows``' bodies, parsed in order until ``max_ops`` sized ops are in hand (one body may pass it),
    and how many ops they hold."""
    parsed: list[tuple[GraphBody, Body]] = []
    ops = 0
    for row in rows:
        if ops >= max_ops:
            break
        body = body_from_text(row.structure, "", "", row.ops)
        if body is not None:
            parsed.append((row, body))
            ops += len(body.ops)
    return parsed, ops


class GraphReports:
    """Builds bucketing reports from the parsed graphs of the index, at most ``slots.count`` at once in the
    whole server (each waits up to ``wait_seconds`` for a slot)."""

    def __init__(
        self, repository: GraphVariantsRepository, slots: ServerSlots, *, wait_seconds: float
    ) -> None:
        self._repository = repository
        self._slots = slots
        self._wait_seconds = wait_seconds

    def report(
        self,
        namespace: str,
        *,
        top: int = 10,
        per_graph: int = DEFAULT_VARIANTS_READ,
        total: int = VARIANTS_READ_PER_REPORT,
        module: str | None = None,
    ) -> list[GraphReport]:
        """The ``top`` graphs of ``namespace`` that cost most to compile (the compile seconds paid, then
        the compiles; variants are a column), each with its report (at most
        ``per_graph`` variants read of one, ``max(total, per_graph)`` in all: :func:`shares`; bodies as the
        module says). :class:`NamespaceNotFound` for a namespace never registered; :class:`GraphsBusy` when
        every slot of the server stayed taken for ``wait_seconds``."""
        return self.namespace_report(
            namespace, top=top, per_graph=per_graph, total=total, module=module
        ).graphs

    def namespace_report(
        self,
        namespace: str,
        *,
        top: int = 10,
        per_graph: int = DEFAULT_VARIANTS_READ,
        total: int = VARIANTS_READ_PER_REPORT,
        module: str | None = None,
    ) -> NamespaceReport:
        """:meth:`report`'s graphs and the steps they make up (:func:`~cache_server.graphs.steps.group_steps`:
        graphs that share an input shape and whose latest bodies differ only by ops an edge size adds or
        drops), the costliest step first."""
        check_namespace(namespace)
        if not self._repository.namespace_exists(namespace):
            raise NamespaceNotFound(f"There is no namespace {namespace!r}.")
        try:
            with self._slots.hold(self._wait_seconds):
                return self._report(namespace, top=top, per_graph=per_graph, total=total, module=module)
        except SlotsBusy:
            raise GraphsBusy(
                f"{self._slots.count} bucketing reports are being built by this server (all its processes); "
                "retry soon."
            ) from None

    def _report(
        self, namespace: str, *, top: int, per_graph: int, total: int, module: str | None
    ) -> NamespaceReport:
        reports: list[GraphReport] = []
        found: list[tuple[frozenset[str], GraphBody | None, Body | None]] = []
        budget = _BodyBudget()
        per_graph = min(per_graph, MAX_VARIANTS_READ)
        ranked = self._repository.ranked(namespace, top=min(top, MAX_TOP), module=module)
        reads = shares([graph.variants for graph in ranked], per_graph=per_graph, total=total)
        sources = self._repository.sources_of(namespace, [graph.module for graph in ranked])
        for graph in self._repository.read_shapes(namespace, ranked, reads):
            shapes, hit_counts = _within_budget(graph.shapes, graph.hits)
            parsed = [
                (s, hits + 1)
                for s, hits in zip(map(parse_shape_signature, shapes), hit_counts, strict=True)
                if s is not None
            ]
            bucketing = analyse([s for s, _ in parsed], weights=[w for _, w in parsed])
            baked, bodies_read, bodies_stored, latest = None, 0, None, None
            if graph.entries > graph.variants or (bucketing.unchanged and graph.variants > 1):
                baked, bodies_read, bodies_stored, latest = self._baked(namespace, graph.module, budget)
            found.append(
                (frozenset(shapes), *latest) if latest is not None else (frozenset(shapes), None, None)
            )
            reports.append(
                GraphReport(
                    module=graph.module,
                    variants=graph.variants,
                    entries=graph.entries,
                    read=len(shapes),
                    example=_example(shapes),
                    bucketing=bucketing,
                    baked=baked,
                    bodies_read=bodies_read,
                    bodies_stored=bodies_stored,
                    compile_seconds=graph.compile_seconds,
                    sources=tuple(sources.get(graph.module, ())),
                    sources_counted=min(graph.entries, SOURCES_READ),
                    source=latest[0].source if latest is not None else None,
                    summary=graph_summary(bucketing, baked),
                )
            )
        return NamespaceReport(reports, self._steps(namespace, reports, found, budget))

    def _steps(
        self,
        namespace: str,
        reports: list[GraphReport],
        found: list[tuple[frozenset[str], GraphBody | None, Body | None]],
        budget: _BodyBudget,
    ) -> list[StepReport]:
        """The steps ``reports``' graphs make up: the latest body of each graph that shares an input shape
        with another (read here where the baked sizes did not, within what is left of ``budget``)."""
        seen: dict[str, int] = {}
        for shapes, _, _ in found:
            for text in shapes:
                seen[text] = seen.get(text, 0) + 1
        graphs: list[StepGraph] = []
        for (shapes, row, body), report in zip(found, reports, strict=True):
            if body is None and any(seen[text] > 1 for text in shapes) and budget.ops > 0:
                read = self._repository.read_bodies(
                    namespace,
                    report.module,
                    limit=1,
                    max_text=max(0, min(BODY_TEXT_PER_GRAPH, budget.text)),
                    counted=False,  # its latest body only: how many it holds is not shown
                ).bodies
                budget.text -= sum(len(r.ops) for r in read)
                parsed, ops = _parsed(read, budget.ops)
                budget.ops -= ops
                if parsed:
                    row, body = parsed[0]
            graphs.append(
                StepGraph(
                    report.module,
                    report.compile_seconds,
                    report.entries,
                    shapes,
                    row.source if row is not None else None,
                    body,
                    call_site=report.sources[0][0] if report.sources else None,
                )
            )
        by_module = {report.module: report for report in reports}
        steps = []
        for step in group_steps(graphs):
            members = [by_module[name] for name in step.modules]
            fix = next((g.summary for g in members if g.summary), None)
            steps.append(StepReport(step, tuple(members), _varies(step, members), fix))
        return steps

    def _baked(
        self, namespace: str, module: str, budget: _BodyBudget
    ) -> tuple[BakedReport | None, int, int, tuple[GraphBody, Body] | None]:
        """``module``'s baked sizes from its latest bodies, within its share and what is left of ``budget``
        (spent here); with how many bodies were compared, how many are stored and the latest one (its row
        and parsed body)."""
        found = self._repository.read_bodies(
            namespace,
            module,
            limit=BODIES_READ_PER_GRAPH,
            max_text=max(0, min(BODY_TEXT_PER_GRAPH, budget.text)) if budget.ops > 0 else 0,
        )
        budget.text -= sum(len(row.ops) for row in found.bodies)
        parsed, ops = _parsed(found.bodies, min(OPS_COMPARED_PER_GRAPH, budget.ops))
        budget.ops -= ops
        group = baked_group_of([(row.shapes, body) for row, body in parsed])
        latest = parsed[0] if parsed else None
        return (baked_report(group) if group is not None else None), len(parsed), found.stored, latest

    def variants(
        self, namespace: str, module: str | None, *, after: str | None = None, limit: int = 500
    ) -> VariantsPage:
        """A page of ``module``'s variants in ``namespace`` (at most ``limit``, after the signature
        ``after``), each with its shapes text and parameters parsed: what a prefill ``--from`` the
        namespace compiles. With no ``module``: the namespace's graphs, to choose one. A range of one index,
        so no report slot is taken. :class:`NamespaceNotFound`; :class:`GraphNotFound` (naming the
        namespace's graphs) for a module it does not hold."""
        check_namespace(namespace)
        if not self._repository.namespace_exists(namespace):
            raise NamespaceNotFound(f"There is no namespace {namespace!r}.")
        if module is None:
            return VariantsPage(None, self._repository.ranked(namespace, top=MAX_TOP), [], None)
        rows = self._repository.module_shapes(namespace, module, after=after, limit=limit)
        if not rows and after is None:
            graphs = [g.module for g in self._repository.ranked(namespace, top=MAX_TOP)]
            named = ", ".join(graphs[:20]) + (" ..." if len(graphs) > 20 else "") if graphs else "none yet"
            raise GraphNotFound(
                f"Namespace {namespace!r} holds no parsed graph {module!r} (its graphs: {named})."
            )
        found = [Variant(sig, text, parse_shape_signature(text)) for sig, text in rows]
        return VariantsPage(module, [], found, rows[-1][0] if len(rows) >= limit else None)

    def prefilled(self, namespace: str) -> tuple[int, int]:
        """How many of ``namespace``'s entries a prefill stored, and how many of those unverified."""
        return self._repository.prefilled(namespace)

    def unparseable(self, namespace: str, *, top: int = 5) -> list[tuple[str, int]]:
        """How many of ``namespace``'s entries hold no graph this parser reads, by reason (the commonest
        ``top``): bytes that are no executable, or an entry that broke a bound of the parser."""
        return self._repository.unparseable(namespace, top=top)
