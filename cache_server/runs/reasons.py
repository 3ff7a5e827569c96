"""Why a run compiled each key it reported: worked out when asked, from what the index knows then.

Each reason of :data:`cache_protocol.runs.MissReason` is a small rule of :data:`RULES`, asked in this order
over the miss's facts (:class:`_Miss`, worked out once); the first that applies gives the reason:

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
  named (:mod:`cache_server.graphs.baked`); or a graph stored there has the miss's sized ops but for a few
  that a size at an edge adds or drops (an empty slice left out of a concatenation: "this size drops an
  op"), which is never ``different_key``;
- ``different_key``: the module is known at these very shapes, under another key. Where the client recorded
  JAX's cache-key components, the ones that differ from the nearest earlier miss of the module that recorded
  them are named; otherwise the graphs say whether the module is the same to the byte (the key differs
  outside it), differs only in metadata (source lines, as ``XLA_HLO_DEBUG`` adds), or in its instructions;
- ``unknown``: the bytes do not parse (not an executable this parser reads) and nothing above applies;
  the detail says what the client knew (its module name).

The module and shapes of a miss are those parsed from its own stored entry; where that is not stored or not
parseable, the module the client reported. A rule applies only where none before it does, and leaves to a
later one what that one says better: a miss whose bytes do not parse is compared by its JAX cache-key
components alone (``different_key``, or else ``unknown``); where an earlier miss's components, or a stored
graph of the same computation at the miss's shapes, say ``different_key``, it is not ``baked_sizes``.
"""

from __future__ import annotations

import datetime as dt
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Final

from cache_protocol.runs import MissReason
from cache_server.domain.runs import MissRecord
from cache_server.graphs.baked import EdgeOps, SizeChange, describe_changes, edge_ops, size_changes
from cache_server.graphs.shapes import Dimension, ShapeSignature, differing_dimensions, parse_shape_signature
from cache_server.index.miss_facts import ComponentMiss, MissFacts, StoredGraph
from cache_server.index.tombstones import TombstoneInfo
from cache_server.parsing.body import Body, body_from_text
from cache_server.runs.variants import ModuleVariants, Variant, VariantsCache

__all__ = ["RULES", "ComponentDifference", "ExplainedMiss", "Rule", "explain"]


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
    reason: MissReason
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
    source: str | None = None  # where the job compiled it (file:line), as its client reported


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
    """The answer of the first rule of :data:`RULES` that applies (the last, ``unknown``, always does)."""
    facts = _Miss.of(miss, context)
    return next(found for found in (rule(facts) for rule in RULES) if found is not None)


@dataclass(frozen=True)
class _OtherShapes:
    """A miss whose module was stored before it, but not at its shapes."""

    ours: ShapeSignature
    nearest: Variant | None  # the nearest stored variant with comparable parameters
    baked: ExplainedMiss | None  # baked_sizes, where only the result's shape differs from the nearest's


@dataclass(frozen=True)
class _Miss:
    """What the rules know of one miss. Its own facts are read when it is built; what is worked out from its
    module's stored entries and earlier misses, when a rule first asks, and kept for the rules after it (so a
    comparison of bodies spends the explanation's :data:`COMPARED_OPS` once)."""

    record: MissRecord
    context: _Context
    own: StoredGraph | None  # its own entry's graph, where that is stored and parsed
    module: str | None  # parsed from its own entry; otherwise the client's
    shapes: str | None  # parsed from its own entry
    tombstone: TombstoneInfo | None  # its key was removed (before the miss, or after it)
    position: int  # in its run's order: a later miss of the run is not "before" it

    @classmethod
    def of(cls, miss: MissRecord, context: _Context) -> _Miss:
        own = context.facts.own.get(miss.key)
        return cls(
            record=miss,
            context=context,
            own=own,
            module=own.module if own is not None and own.module is not None else miss.module,
            shapes=own.shapes if own is not None else None,
            tombstone=context.facts.tombstones.get(miss.key),
            position=context.order.get(miss.key, len(context.order)),
        )

    def explained(self, reason: MissReason, detail: str, *, nearest_key: str | None = None) -> ExplainedMiss:
        """The miss with its reason, its detail and the stored key it names (what else supports them is added
        with :func:`dataclasses.replace`)."""
        return ExplainedMiss(
            key=self.record.key,
            module=self.module,
            reason=reason,
            detail=detail,
            compile_ms=self.record.compile_ms,
            load_failed=self.record.load_failed,
            components=self.record.components,
            shapes=self.shapes,
            nearest_key=nearest_key,
            source=self.record.source,
        )

    @property
    def opaque(self) -> bool:
        """Its own entry is stored and its bytes do not parse: there is no graph of it to compare."""
        return self.own is not None and self.own.module is None

    def before(self, graph: StoredGraph) -> bool:
        """Whether a stored entry (of another key) counts as there before the miss."""
        return graph.key != self.record.key and _before(
            graph, self.position, self.context.order, self.record.reported_at
        )

    @cached_property
    def ours(self) -> ShapeSignature | None:
        """Its shapes, parsed."""
        return _signature(self.shapes) if self.shapes else None

    @cached_property
    def earlier(self) -> list[ComponentMiss]:
        """The latest misses before it of its module (by the client's name too) that recorded components."""
        if self.module is None:
            return []
        names = (
            [self.module] if self.record.module in (None, self.module) else [self.module, self.record.module]
        )
        return self.context.earlier_misses(names, self.record.key, self.record.reported_at)

    @cached_property
    def any_prior(self) -> bool:
        """Whether an entry of its module was stored before it."""
        return self.module is not None and self.context.any_before(
            self.module, self.position, self.record.reported_at
        )

    @cached_property
    def same_shapes(self) -> list[StoredGraph]:
        """The entries of its module stored before it at its very shapes (none where it is opaque)."""
        if self.module is None or self.opaque:
            return []
        stored = self.context.variants(self.module).by_shapes.get(self.shapes or "", [])
        return [g for g in stored if self.before(g)]

    @cached_property
    def same_computation(self) -> ExplainedMiss | None:
        """``different_key`` by the JAX cache-key components (:func:`_by_components`)."""
        return _by_components(self)

    @cached_property
    def at_other_shapes(self) -> _OtherShapes | None:
        """Where its module was stored before it, but not at its shapes: the nearest stored variant, and
        ``baked_sizes`` where only the result's shape differs from that one's (:func:`_result_only`)."""
        if self.module is None or self.opaque or self.ours is None or not self.any_prior or self.same_shapes:
            return None
        variants = self.context.variants(self.module)
        nearest = variants.nearest(self.shapes or "", self.before)
        return _OtherShapes(self.ours, nearest, _result_only(self, self.module, self.ours, variants, nearest))


Rule = Callable[[_Miss], ExplainedMiss | None]
"""One reason's rule: the miss explained by that reason, or None where the reason does not apply."""


def _load_failed(m: _Miss) -> ExplainedMiss | None:
    """The client found an entry of the key and could not load it."""
    if not m.record.load_failed:
        return None
    return m.explained("load_failed", "an entry of this key was stored, but it failed to load")


def _evicted(m: _Miss) -> ExplainedMiss | None:
    """The key was stored once and removed before the miss: its tombstone says when, by which policy."""
    gone, at = m.tombstone, m.record.reported_at
    if gone is None or (at is not None and gone.removed_at > at):
        return None
    return replace(
        m.explained("evicted", f"stored once, removed {_when(gone)} by policy {gone.policy}"),
        removed_at=gone.removed_at,
        policy=gone.policy,
    )


def _new_graph(m: _Miss) -> ExplainedMiss | None:
    """No entry of the miss's module was stored before it, and no earlier miss of it recorded components."""
    if m.module is None or m.opaque or m.any_prior or m.earlier:
        return None
    return m.explained("new_graph", f"no entry of module {m.module} was stored in this namespace before")


def _new_shapes(m: _Miss) -> ExplainedMiss | None:
    """The module was stored before the miss, at other shapes: the parameter dimensions that differ from the
    nearest stored variant are named (unless only the result's shape differs and it is ``baked_sizes``)."""
    other = m.at_other_shapes
    if m.module is None or other is None or other.baked is not None:
        return None
    return _shapes_named(m, m.module, other.ours, other.nearest)


def _baked_sizes(m: _Miss) -> ExplainedMiss | None:
    """A stored graph of the miss's structure, at its input shapes, differs only in sizes inside: at its very
    shapes (where no earlier miss's components and no stored graph of the same computation say
    ``different_key``), or at its parameters with only the result's shape differing."""
    other = m.at_other_shapes
    if other is not None:
        return other.baked
    own, stored = m.own, m.same_shapes
    if m.module is None or own is None or not own.structure or not stored or m.same_computation is not None:
        return None
    if any(g.whole == own.whole or g.program == own.program for g in stored):
        return None  # the same module, or the same computation: different_key says which
    inside = _sizes_inside(m, m.module, own, [g for g in stored if g.structure == own.structure])
    return inside if inside is not None else _edge_sizes(m, m.module, own, stored)


def _different_key(m: _Miss) -> ExplainedMiss | None:
    """The module is known at the miss's shapes under another key: the JAX cache-key components that differ
    from an earlier miss of the same computation, or else what the stored graphs at those shapes say. A
    miss whose bytes do not parse, or whose shapes are not known, is compared by its components alone."""
    if m.module is None:
        return None
    by_components = m.opaque or bool(m.same_shapes) or (m.ours is None and bool(m.earlier))
    if by_components and m.same_computation is not None:
        return m.same_computation
    return _stored_alike(m, m.module, m.same_shapes) if m.same_shapes else None


def _unknown(m: _Miss) -> ExplainedMiss:
    """Nothing else applies: the detail says what the client knew."""
    gone = m.tombstone
    if m.module is None and gone is not None:  # removed after the miss: its graph went with it
        return m.explained(
            "unknown",
            f"the entry was stored, then removed {_when(gone)} by policy {gone.policy}: its graph is no "
            "longer known",
        )
    if m.module is None or m.opaque or not m.any_prior:
        return m.explained("unknown", _opaque(m.record))
    return m.explained("unknown", _opaque(m.record) + f"; module {m.module} has stored entries")


RULES: Final[tuple[Rule, ...]] = (
    _load_failed,
    _evicted,
    _new_graph,
    _new_shapes,
    _baked_sizes,
    _different_key,
    _unknown,
)
"""One rule per reason, in the order they are asked (the module docstring's): the first that applies gives
the miss's reason; the last, ``unknown``, applies to every miss."""


def _by_components(m: _Miss) -> ExplainedMiss | None:
    """``different_key`` naming the JAX cache-key components that differ from the nearest earlier miss
    of the same computation; None when no earlier miss has the same computation hash."""
    found = _component_difference(m.record, m.earlier)
    if found is None:
        return None
    other, diffs = found
    if not diffs or any(d.component == "computation" for d in diffs):
        return None
    names = ", ".join(d.component for d in diffs)
    detail = f"same computation as key {other.key}; JAX's cache key differs in {names}"
    return replace(m.explained("different_key", detail, nearest_key=other.key), differing_components=diffs)


def _stored_alike(m: _Miss, module: str, stored: list[StoredGraph]) -> ExplainedMiss:
    """``different_key`` for a miss of a module stored at these very shapes under another key: the same
    module to the byte, the same computation but for metadata, or other instructions (``baked_sizes``, the
    same graph at other sizes, is asked before)."""
    at = f"module {module} is stored at these shapes under key {stored[0].key}"
    own = m.own
    if own is not None and own.structure:
        for graph in stored:
            if graph.whole == own.whole:
                return m.explained(
                    "different_key",
                    f"module {module} is stored under key {graph.key} and is the same module to the byte: "
                    "the key differs by what is outside the module (compile options, flags, versions)",
                    nearest_key=graph.key,
                )
        for graph in stored:
            if graph.program == own.program:
                return m.explained(
                    "different_key",
                    f"module {module} is stored under key {graph.key} with the same computation; only its "
                    "metadata differs (op names or source lines, as XLA_HLO_DEBUG and XLA_IR_DEBUG add)",
                    nearest_key=graph.key,
                )
        if any(g.structure for g in stored):
            return m.explained(
                "different_key",
                f"{at}, but its instructions differ (another computation under the same name, or the same "
                "step at a size that adds or drops an op, such as an empty or whole slice)",
                nearest_key=stored[0].key,
            )
    recorded = "" if m.record.components else " (no cache-key components recorded to say which part)"
    return m.explained("different_key", f"{at}; the key differs{recorded}", nearest_key=stored[0].key)


def _result_only(
    m: _Miss, module: str, ours: ShapeSignature, variants: ModuleVariants, nearest: Variant | None
) -> ExplainedMiss | None:
    """``baked_sizes`` for a miss whose parameters are stored at the nearest variant's shapes, only the
    result's differing: a graph of its structure stored at its parameters differs only in sizes inside."""
    own = m.own
    if own is None or nearest is None or nearest.graph.shapes is None:
        return None
    theirs = _signature(nearest.graph.shapes)
    if theirs is None or differing_dimensions(ours, theirs) != []:
        return None
    params = _params(m.shapes or "")
    same_params = [
        g for g in variants.same_structure(own.structure) if m.before(g) and _params(g.shapes or "") == params
    ]
    return _sizes_inside(m, module, own, same_params)


def _sizes_inside(m: _Miss, module: str, own: StoredGraph, stored: list[StoredGraph]) -> ExplainedMiss | None:
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
    context = m.context
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
        return m.explained(
            "baked_sizes",
            f"{at} (key {same[0].key}); which sizes differ was not worked out (the bodies compared per "
            "request are bounded: a smaller page names them)",
            nearest_key=same[0].key,
        )
    _, graph, changes = best
    named = describe_changes(changes) or "the sizes of intermediate results differ"
    return replace(
        m.explained("baked_sizes", f"{at} (key {graph.key}): {named}", nearest_key=graph.key),
        baked=changes[:LISTED],
        more=max(0, len(changes) - LISTED),
    )


def _edge_sizes(m: _Miss, module: str, own: StoredGraph, stored: list[StoredGraph]) -> ExplainedMiss | None:
    """``baked_sizes`` where a size at an edge adds or drops an op: a graph stored at the miss's very shapes
    has another structure, but its sized ops are the miss's but for a few that one of them adds or drops
    (:func:`~cache_server.graphs.baked.edge_ops`: an empty slice left out of a concatenation). Of the
    latest :data:`COMPARED_BODIES` such entries whose bodies were read, the one that differs in the fewest
    ops is named, as far as the explanation's :data:`COMPARED_OPS` go; None where none does
    (``different_key`` then)."""
    context = m.context
    ours = context.body(own)
    if ours is None:
        return None
    others = sorted(
        (g for g in stored if g.structure and g.structure != own.structure and context.body(g) is not None),
        key=lambda g: g.created_at,
        reverse=True,
    )
    best: tuple[int, StoredGraph, EdgeOps] | None = None
    for graph in others[:COMPARED_BODIES]:
        theirs = context.body(graph)
        if theirs is None or context.ops_left < len(ours.ops) + len(theirs.ops):
            break
        context.ops_left -= len(ours.ops) + len(theirs.ops)
        found = edge_ops(ours, theirs)
        if found is not None and (best is None or len(found.ours) + len(found.theirs) < best[0]):
            best = (len(found.ours) + len(found.theirs), graph, found)
    if best is None:
        return None
    _, graph, found = best
    detail = (
        f"module {module} is stored at the same input shapes (key {graph.key}) with the same sized ops but "
        f"for those a size at an edge adds or drops: {found.describe()}"
    )
    return m.explained("baked_sizes", detail, nearest_key=graph.key)


def _params(shapes: str) -> str:
    """The parameters' part of a shapes text (``(f32[2,16], f32[16,3])``)."""
    return shapes.rpartition(") -> ")[0]


def _before(graph: StoredGraph, position: int, order: dict[str, int], at: dt.datetime | None) -> bool:
    """Whether a stored entry counts as there before a miss (at ``position`` in its run's order)."""
    own_position = order.get(graph.key)
    if own_position is not None:  # compiled by the same run: before only if reported earlier
        return own_position < position
    return at is None or graph.created_at <= at


def _shapes_named(m: _Miss, module: str, ours: ShapeSignature, found: Variant | None) -> ExplainedMiss:
    """``new_shapes`` naming the parameter dimensions that differ from the nearest stored variant."""
    theirs = None if found is None or found.graph.shapes is None else _signature(found.graph.shapes)
    if found is None or theirs is None:
        return m.explained(
            "new_shapes", f"module {module} is stored only with parameters of another number, type or rank"
        )
    dims = differing_dimensions(ours, theirs) or []
    named = "; ".join(d.describe() for d in dims) or "the result's shape differs"
    return replace(
        m.explained("new_shapes", f"new shapes of module {module}: {named}", nearest_key=found.graph.key),
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


def _when(tombstone: TombstoneInfo) -> str:
    return tombstone.removed_at.strftime("%Y-%m-%d %H:%M:%S UTC")
