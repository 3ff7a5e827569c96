"""Why a run compiled each key it reported: worked out when asked, from what the index knows then.

In this order, the first that applies (:data:`cache_protocol.runs.MISS_REASONS`):

- ``load_failed``: the client found an entry of the key and could not load it;
- ``evicted``: the key was stored once and removed before the miss (its tombstone: when, which policy);
- ``new_graph``: no entry of the miss's module was stored in the namespace before it. "Before" counts the
  misses of the same run in the order reported: of three shapes of one new module compiled by one run, the
  first is a new graph and the other two are new shapes of it;
- ``new_shapes``: the module is known at other shapes: the parameter dimensions that differ from the
  nearest stored variant (:func:`cache_server.graphs.shapes.nearest`) are named;
- ``baked_sizes``: the module is known at these very input shapes, and the stored graph of the same
  structure differs only in sizes inside it (slice limits, pad widths, iota lengths, broadcast shapes,
  literals: a step that slices or pads by Python integers): the ops, their sources and the sizes are
  named (:mod:`cache_server.graphs.baked`);
- ``different_key``: the module is known at these very shapes, under another key. Where the client recorded
  JAX's cache-key components, the ones that differ from the nearest earlier miss of the module that recorded
  them are named; otherwise the graphs say whether the module is the same to the byte (the key differs
  outside it), differs only in metadata (source lines, as ``XLA_HLO_DEBUG`` adds), or in its instructions;
- ``unknown``: the bytes do not parse (not an executable this parser reads) and nothing above applies;
  the detail says what the client knew (its module name).

The module and shapes of a miss are those parsed from its own stored entry; where that is not stored or not
parseable, the module the client reported.
"""

from __future__ import annotations

import datetime as dt
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from cache_server.domain.runs import MissRecord
from cache_server.graphs.baked import SizeChange, describe_changes, size_changes
from cache_server.graphs.shapes import Dimension, ShapeSignature, differing_dimensions, parse_shape_signature
from cache_server.index.miss_facts import ComponentMiss, MissFacts, StoredGraph
from cache_server.parsing.body import Body, body_from_text
from cache_server.runs.variants import ModuleVariants, Variant, VariantsCache

__all__ = ["ComponentDifference", "ExplainedMiss", "explain"]


@dataclass(frozen=True)
class ComponentDifference:
    """A JAX cache-key component whose hash differs from the nearest earlier miss's."""

    component: str
    ours: str | None
    theirs: str | None


@dataclass(frozen=True)
class ExplainedMiss:
    """One miss with its reason and what supports it."""

    key: str
    module: str | None
    reason: str
    detail: str
    compile_ms: int | None
    load_failed: bool
    components: dict[str, str] | None
    shapes: str | None = None
    nearest_key: str | None = None
    dimensions: list[Dimension] = field(default_factory=list)
    differing_components: list[ComponentDifference] = field(default_factory=list)
    removed_at: dt.datetime | None = None
    policy: str | None = None
    baked: list[SizeChange] = field(default_factory=list)
    more: int = 0  # sizes or dimensions that differ beyond those listed (at most LISTED each)


COMPARED_MISSES = 200
"""Earlier misses with components a miss is compared with (the latest ones before it)."""
COMPARED_BODIES = 4
"""Stored entries of a miss's structure whose sizes it is compared with (the latest ones before it whose
bodies were read: :data:`cache_server.index.miss_facts.NEAREST_BODIES` of each structure)."""
COMPARED_OPS = 32_000
"""Sized ops one explanation may compare in all (a comparison costs about 20 microseconds an op: a body of
1,000 ops against another is 20 ms); past it, a miss of a known structure is still ``baked_sizes``, with
the sizes not worked out."""
LISTED = 16
"""Sizes (``baked``) or dimensions one miss lists; the rest are counted in ``more``."""


class _Context:
    """What one explanation shares across its misses: the run's order and each module's variants and
    earlier misses, indexed once."""

    def __init__(self, run_keys: Sequence[str], facts: MissFacts, cache: VariantsCache) -> None:
        self.order = {key: index for index, key in enumerate(run_keys)}
        self.facts = facts
        self._cache = cache
        self._variants: dict[str, ModuleVariants] = {}
        self._firsts: dict[str, tuple[dt.datetime | None, int | None]] = {}
        self._recorded: dict[str, tuple[list[dt.datetime], list[ComponentMiss]]] = {}
        self._bodies: dict[str, Body | None] = {}
        self.ops_left = COMPARED_OPS

    def body(self, graph: StoredGraph) -> Body | None:
        """A stored graph's body with its sized ops, when the index has them."""
        if graph.key not in self._bodies:
            text = self.facts.ops.get(graph.key)
            ok = text is not None and graph.structure and graph.program and graph.whole
            self._bodies[graph.key] = (
                body_from_text(graph.structure or "", graph.program or "", graph.whole or "", text or "")
                if ok
                else None
            )
        return self._bodies[graph.key]

    def variants(self, module: str) -> ModuleVariants:
        if module not in self._variants:
            graphs = self.facts.variants.get(module, [])
            self._variants[module] = self._cache.get(self.facts.namespace, module, graphs)
        return self._variants[module]

    def any_before(self, module: str, position: int, at: dt.datetime | None) -> bool:
        """Whether an entry of ``module`` was stored before the miss at ``position`` of its run."""
        if module not in self._firsts:
            graphs = self.facts.variants.get(module, [])
            outside = [g.created_at for g in graphs if g.key not in self.order]
            inside = [self.order[g.key] for g in graphs if g.key in self.order]
            self._firsts[module] = (min(outside, default=None), min(inside, default=None))
        first_outside, first_inside = self._firsts[module]
        if first_inside is not None and first_inside < position:
            return True
        return first_outside is not None and (at is None or first_outside <= at)

    def earlier_misses(self, modules: Sequence[str], key: str, at: dt.datetime | None) -> list[ComponentMiss]:
        """The latest misses (other than ``key``) of these modules that recorded components, before ``at``."""
        found: list[ComponentMiss] = []
        for module in dict.fromkeys(modules):
            if module not in self._recorded:
                ascending = sorted(self.facts.component_misses.get(module, []), key=lambda m: m.reported_at)
                self._recorded[module] = ([m.reported_at for m in ascending], ascending)
            times, ascending = self._recorded[module]
            end = len(times) if at is None else bisect_left(times, at)
            found.extend(
                m for m in reversed(ascending[max(0, end - COMPARED_MISSES - 1) : end]) if m.key != key
            )
        return found[: 2 * COMPARED_MISSES]


@lru_cache(maxsize=20_000)
def _signature(shapes: str) -> ShapeSignature | None:
    return parse_shape_signature(shapes)


def explain(
    misses: Sequence[MissRecord],
    run_keys: Sequence[str],
    facts: MissFacts,
    cache: VariantsCache | None = None,
) -> list[ExplainedMiss]:
    """The reason of each of ``misses`` (some of one run's, in report order); ``run_keys`` are every key
    the run reported, in order (a later miss of the run is not "before" an earlier one). ``cache`` keeps
    the modules' variant indexes between calls."""
    context = _Context(run_keys, facts, cache or VariantsCache())
    return [_explain(miss, context) for miss in misses]


def _explain(miss: MissRecord, context: _Context) -> ExplainedMiss:
    facts = context.facts
    own = facts.own.get(miss.key)
    module = own.module if own is not None and own.module is not None else miss.module
    shapes = own.shapes if own is not None else None
    base = ExplainedMiss(
        key=miss.key,
        module=module,
        reason="unknown",
        detail="",
        compile_ms=miss.compile_ms,
        load_failed=miss.load_failed,
        components=miss.components,
        shapes=shapes,
    )
    if miss.load_failed:
        return _with(base, "load_failed", "an entry of this key was stored, but it failed to load")
    tombstone = facts.tombstones.get(miss.key)
    if tombstone is not None and (miss.reported_at is None or tombstone.removed_at <= miss.reported_at):
        when = tombstone.removed_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        return _with(
            base,
            "evicted",
            f"stored once, removed {when} by policy {tombstone.policy}",
            removed_at=tombstone.removed_at,
            policy=tombstone.policy,
        )
    opaque = own is not None and own.module is None  # stored, and its bytes do not parse
    if module is None and tombstone is not None:  # removed after the miss: its graph went with it
        when = tombstone.removed_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        return _with(
            base,
            "unknown",
            f"the entry was stored, then removed {when} by policy {tombstone.policy}: its graph is no "
            "longer known",
        )
    if module is None:
        return _with(base, "unknown", _opaque(miss))
    position = context.order.get(miss.key, len(context.order))

    def before(graph: StoredGraph) -> bool:
        return graph.key != miss.key and _before(graph, position, context.order, miss.reported_at)

    names = [module] if miss.module in (None, module) else [module, miss.module]  # the client's name too
    earlier_misses = context.earlier_misses(names, miss.key, miss.reported_at)
    if opaque:
        return _opaque_reason(base, miss, earlier_misses)
    any_prior = context.any_before(module, position, miss.reported_at)
    if not any_prior and not earlier_misses:
        return _with(base, "new_graph", f"no entry of module {module} was stored in this namespace before")
    variants = context.variants(module)
    ours = _signature(shapes) if shapes else None
    same_shapes = [g for g in variants.by_shapes.get(shapes or "", []) if before(g)]
    if ours is not None and any_prior and not same_shapes:
        found = variants.nearest(shapes or "", before)
        if own is not None and found is not None and found.graph.shapes is not None:
            theirs = _signature(found.graph.shapes)
            if theirs is not None and differing_dimensions(ours, theirs) == []:  # only the result differs
                params = _params(shapes or "")
                same_params = [
                    g
                    for g in variants.same_structure(own.structure)
                    if before(g) and _params(g.shapes or "") == params
                ]
                baked = _baked(base, module, own, same_params, context)
                if baked is not None:
                    return baked
        return _new_shapes(base, module, ours, found)
    if same_shapes or (ours is None and earlier_misses):
        by_components = _same_computation(base, miss, earlier_misses)
        if by_components is not None:
            return by_components
        if same_shapes:
            return _same_shapes(base, module, own, same_shapes, context, recorded=bool(miss.components))
    if not any_prior:
        return _with(base, "unknown", _opaque(miss))
    return _with(base, "unknown", _opaque(miss) + f"; module {module} has stored entries")


def _same_computation(
    base: ExplainedMiss, miss: MissRecord, earlier: list[ComponentMiss]
) -> ExplainedMiss | None:
    """``different_key`` naming the JAX cache-key components that differ from the nearest earlier miss
    of the same computation; None when no earlier miss has the same computation hash."""
    found = _component_difference(miss, earlier)
    if found is None:
        return None
    other, diffs = found
    if not diffs or any(d.component == "computation" for d in diffs):
        return None
    names = ", ".join(d.component for d in diffs)
    return _with(
        base,
        "different_key",
        f"same computation as key {other.key}; JAX's cache key differs in {names}",
        nearest_key=other.key,
        differing_components=diffs,
    )


def _opaque_reason(base: ExplainedMiss, miss: MissRecord, earlier: list[ComponentMiss]) -> ExplainedMiss:
    """A miss whose stored bytes do not parse: its components may still say which part of the key
    differs; otherwise unknown, with what the client knew."""
    return _same_computation(base, miss, earlier) or _with(base, "unknown", _opaque(miss))


def _same_shapes(
    base: ExplainedMiss,
    module: str,
    own: StoredGraph | None,
    stored: list[StoredGraph],
    context: _Context,
    *,
    recorded: bool,
) -> ExplainedMiss:
    """A miss of a module stored at these very shapes under another key: the same module to the byte, the
    same computation but for metadata, the same graph at other sizes (``baked_sizes``), or other
    instructions."""
    at = f"module {module} is stored at these shapes under key {stored[0].key}"
    if own is not None and own.structure:
        for graph in stored:
            if graph.whole == own.whole:
                return _with(
                    base,
                    "different_key",
                    f"module {module} is stored under key {graph.key} and is the same module to the byte: "
                    "the key differs by what is outside the module (compile options, flags, versions)",
                    nearest_key=graph.key,
                )
        for graph in stored:
            if graph.program == own.program:
                return _with(
                    base,
                    "different_key",
                    f"module {module} is stored under key {graph.key} with the same computation; only its "
                    "metadata differs (op names or source lines, as XLA_HLO_DEBUG and XLA_IR_DEBUG add)",
                    nearest_key=graph.key,
                )
        baked = _baked(base, module, own, [g for g in stored if g.structure == own.structure], context)
        if baked is not None:
            return baked
        if any(g.structure for g in stored):
            return _with(
                base,
                "different_key",
                f"{at}, but its instructions differ (another computation under the same name, or the same "
                "step at a size that adds or drops an op, such as an empty or whole slice)",
                nearest_key=stored[0].key,
            )
    return _with(
        base,
        "different_key",
        f"{at}; the key differs"
        + ("" if recorded else " (no cache-key components recorded to say which part)"),
        nearest_key=stored[0].key,
    )


def _baked(
    base: ExplainedMiss, module: str, own: StoredGraph, stored: list[StoredGraph], context: _Context
) -> ExplainedMiss | None:
    """``baked_sizes``: the miss's graph is stored with the same structure (the same ops, other sizes inside:
    its program differs). Of the latest :data:`COMPARED_BODIES` such entries whose bodies were read, the one
    whose sizes differ from the miss's in the fewest places is named with those sizes, as far as the
    explanation's :data:`COMPARED_OPS` go; without one, the latest is named and the sizes are not. None
    when no stored entry has the miss's structure."""
    if not own.structure:
        return None
    same = sorted(
        (g for g in stored if g.structure == own.structure and g.program != own.program),
        key=lambda g: g.created_at,
        reverse=True,
    )
    if not same:
        return None
    ours = context.body(own)
    best: tuple[tuple[int, float], StoredGraph, list[SizeChange]] | None = None
    compared = [g for g in same if context.body(g) is not None][:COMPARED_BODIES] if ours is not None else []
    for graph in compared:
        theirs = context.body(graph)
        if ours is None or theirs is None or context.ops_left < len(ours.ops):
            break
        context.ops_left -= len(ours.ops)
        changes = size_changes(ours, theirs)
        if changes is None:
            continue
        # the fewest sizes that differ, then the smallest difference (then the latest stored)
        distance = sum(abs(c.ours - c.theirs) for c in changes if c.ours is not None and c.theirs is not None)
        if best is None or (len(changes), distance) < best[0]:
            best = ((len(changes), distance), graph, changes)
    at = f"module {module} is stored at the same input shapes with other sizes inside the graph"
    if best is None:
        return _with(
            base,
            "baked_sizes",
            f"{at} (key {same[0].key}); which sizes differ was not worked out (the bodies compared per "
            "request are bounded: a smaller page names them)",
            nearest_key=same[0].key,
        )
    _, graph, changes = best
    named = describe_changes(changes) or "the sizes of intermediate results differ"
    return _with(
        base,
        "baked_sizes",
        f"{at} (key {graph.key}): {named}",
        nearest_key=graph.key,
        baked=changes[:LISTED],
        more=max(0, len(changes) - LISTED),
    )


def _params(shapes: str) -> str:
    """The parameters' part of a shapes text (``(f32[2,16], f32[16,3])``)."""
    return shapes.rpartition(") -> ")[0]


def _before(graph: StoredGraph, position: int, order: dict[str, int], at: dt.datetime | None) -> bool:
    """Whether a stored entry counts as there before a miss (at ``position`` in its run's order)."""
    own_position = order.get(graph.key)
    if own_position is not None:  # compiled by the same run: before only if reported earlier
        return own_position < position
    return at is None or graph.created_at <= at


def _new_shapes(
    base: ExplainedMiss, module: str, ours: ShapeSignature, found: Variant | None
) -> ExplainedMiss:
    theirs = None if found is None or found.graph.shapes is None else _signature(found.graph.shapes)
    if found is None or theirs is None:
        return _with(
            base,
            "new_shapes",
            f"module {module} is stored only with parameters of another number, type or rank",
        )
    dims = differing_dimensions(ours, theirs) or []
    named = "; ".join(d.describe() for d in dims) or "the result's shape differs"
    return _with(
        base,
        "new_shapes",
        f"new shapes of module {module}: {named}",
        nearest_key=found.graph.key,
        dimensions=dims[:LISTED],
        more=max(0, len(dims) - LISTED),
    )


def _component_difference(
    miss: MissRecord, earlier: list[ComponentMiss]
) -> tuple[ComponentMiss, list[ComponentDifference]] | None:
    """The earlier miss whose components differ from ``miss``'s in the fewest (the latest of equals),
    with the differing components; None without components on either side. Where ``miss`` recorded its
    computation's hash, only earlier misses of the same computation count: a miss of another shape of
    the same run (only the computation differs) is no explanation of this key."""
    if not miss.components:
        return None
    computation = miss.components.get("computation")
    if computation is not None:
        earlier = [other for other in earlier if other.components.get("computation") == computation]
    best: tuple[int, ComponentMiss, list[ComponentDifference]] | None = None
    for other in earlier:  # latest first
        names = sorted(set(miss.components) | set(other.components))
        diffs = [
            ComponentDifference(name, miss.components.get(name), other.components.get(name))
            for name in names
            if miss.components.get(name) != other.components.get(name)
        ]
        if best is None or len(diffs) < best[0]:
            best = (len(diffs), other, diffs)
    return None if best is None else (best[1], best[2])


def _opaque(miss: MissRecord) -> str:
    known = f"module {miss.module}" if miss.module else "no module name"
    return f"the entry's bytes were not parsed (opaque, or not stored); the client knew {known}"


def _with(base: ExplainedMiss, reason: str, detail: str, **more: object) -> ExplainedMiss:
    return replace(base, reason=reason, detail=detail, **more)  # type: ignore[arg-type]
