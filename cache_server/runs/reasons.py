"""Why a run compiled each key it reported: worked out when asked, from what the index knows then.

In this order, the first that applies (:data:`cache_protocol.runs.MISS_REASONS`):

- ``load_failed``: the client found an entry of the key and could not load it;
- ``evicted``: the key was stored once and removed before the miss (its tombstone: when, which policy);
- ``new_graph``: no entry of the miss's module was stored in the namespace before it. "Before" counts the
  misses of the same run in the order reported: of three shapes of one new module compiled by one run, the
  first is a new graph and the other two are new shapes of it;
- ``new_shapes``: the module is known at other shapes: the parameter dimensions that differ from the
  nearest stored variant (:func:`cache_server.graphs.shapes.nearest`) are named;
- ``different_key``: the module is known at these very shapes, under another key. Where the client recorded
  JAX's cache-key components, the ones that differ from the nearest earlier miss of the module that recorded
  them are named;
- ``unknown``: the bytes are opaque (a TPU executable does not parse) and nothing above applies; the detail
  says what the client knew (its module name).

The module and shapes of a miss are those parsed from its own stored entry; where that is not stored or not
parseable, the module the client reported.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from cache_server.graphs.shapes import Dimension, Signature, nearest, parse_signature
from cache_server.index.miss_facts import ComponentMiss, MissFacts, StoredGraph
from cache_server.index.runs import MissRecord

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


@lru_cache(maxsize=4096)
def _signature(shapes: str) -> Signature | None:
    return parse_signature(shapes)


def explain(misses: Sequence[MissRecord], run_keys: Sequence[str], facts: MissFacts) -> list[ExplainedMiss]:
    """The reason of each of ``misses`` (some of one run's, in report order); ``run_keys`` are every key
    the run reported, in order (a later miss of the run is not "before" an earlier one)."""
    order = {key: index for index, key in enumerate(run_keys)}
    return [_explain(miss, order, facts) for miss in misses]


def _explain(miss: MissRecord, order: dict[str, int], facts: MissFacts) -> ExplainedMiss:
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
    if module is None:
        return _with(base, "unknown", _opaque(miss))
    position = order.get(miss.key, len(order))
    prior = [
        graph
        for graph in facts.variants.get(module, [])
        if graph.key != miss.key and _before(graph, position, order, miss.reported_at)
    ]
    recorded = facts.component_misses.get(module, [])
    if miss.module is not None and miss.module != module:  # the client's name for it, where it differs
        recorded = recorded + facts.component_misses.get(miss.module, [])
    earlier_misses = [
        m
        for m in recorded
        if m.key != miss.key and (miss.reported_at is None or m.reported_at < miss.reported_at)
    ]
    if opaque:
        return _opaque_reason(base, miss, earlier_misses)
    if not prior and not earlier_misses:
        return _with(base, "new_graph", f"no entry of module {module} was stored in this namespace before")
    ours = _signature(shapes) if shapes else None
    same_shapes = [g for g in prior if shapes is not None and g.shapes == shapes]
    if ours is not None and prior and not same_shapes:
        return _new_shapes(base, module, ours, prior)
    if same_shapes or (ours is None and earlier_misses):
        by_components = _same_computation(base, miss, earlier_misses)
        if by_components is not None:
            return by_components
        if same_shapes:
            return _with(
                base,
                "different_key",
                f"module {module} is stored at these shapes under key {same_shapes[0].key}; the key differs"
                + ("" if miss.components else " (no cache-key components recorded to say which part)"),
                nearest_key=same_shapes[0].key,
            )
    if not prior:
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


def _before(graph: StoredGraph, position: int, order: dict[str, int], at: dt.datetime | None) -> bool:
    """Whether a stored entry counts as there before a miss (at ``position`` in its run's order)."""
    own_position = order.get(graph.key)
    if own_position is not None:  # compiled by the same run: before only if reported earlier
        return own_position < position
    return at is None or graph.created_at <= at


def _new_shapes(base: ExplainedMiss, module: str, ours: Signature, prior: list[StoredGraph]) -> ExplainedMiss:
    by_shapes: dict[str, StoredGraph] = {}
    for graph in prior:  # the latest stored first: one candidate per distinct shapes
        if graph.shapes is not None:
            by_shapes.setdefault(graph.shapes, graph)
    signatures = {text: sig for text in by_shapes if (sig := _signature(text)) is not None}
    found = nearest(ours, list(signatures.values()))
    if found is None:
        return _with(
            base,
            "new_shapes",
            f"module {module} is stored only with parameters of another number, type or rank",
        )
    theirs, dims = found
    text = next(t for t, sig in signatures.items() if sig == theirs)
    named = "; ".join(d.describe() for d in dims) or "the result's shape differs"
    return _with(
        base,
        "new_shapes",
        f"new shapes of module {module}: {named}",
        nearest_key=by_shapes[text].key,
        dimensions=dims,
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
