"""What the index knows that explains a compile (:mod:`cache_server.runs.reasons` reads it through here):
the graphs parsed from stored entries, the variants of a module stored in a namespace, the JAX cache-key
components earlier misses recorded, and the tombstones of removed keys."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Select, select, tuple_

from cache_server.index.database import Database, chunked
from cache_server.index.models import Entry, EntryGraph, RunMiss
from cache_server.index.tombstones import TombstoneInfo, tombstones_of

__all__ = ["ComponentMiss", "MissFacts", "StoredGraph", "read_facts"]

MAX_VARIANTS = 20_000
"""Bound on the stored variants read for one explanation (the seed's busiest graph has a few thousand)."""
MAX_VARIANT_TEXT = 8 * 1024 * 1024
"""Bound on the characters of shapes text those variants bring (each up to 16 KiB: 20,000 of them would be
320 MiB); read :data:`VARIANT_PAGE` rows at a time until it is reached."""
VARIANT_PAGE = 1_000
MAX_COMPONENT_MISSES = 5_000
"""Bound on the earlier misses with JAX cache-key components read for one explanation."""
MAX_OPS_TEXT = 2 * 1024 * 1024
"""Bound on the characters of sized-ops text (up to 64 KiB an entry) one explanation reads: the page's own
entries' and their nearest stored neighbours' (each such text becomes a body of up to 0.6 MiB to compare)."""
NEAREST_BODIES = 4
"""Stored entries of one structure whose sized ops are read to compare with (the latest before the page's
misses), chosen by the query: never a whole structure."""


@dataclass(frozen=True)
class StoredGraph:
    """A stored entry's parsed graph: its module, its shapes text (None: not parseable), when stored, and
    its body's digests (None: parsed before bodies were read; ``""`` structure: too large to walk)."""

    key: str
    module: str | None
    shapes: str | None
    created_at: dt.datetime
    structure: str | None = None
    program: str | None = None
    whole: str | None = None


@dataclass(frozen=True)
class ComponentMiss:
    """An earlier miss of a module that recorded JAX's cache-key components."""

    run_id: str
    key: str
    module: str
    components: dict[str, str]
    reported_at: dt.datetime


@dataclass(frozen=True)
class MissFacts:
    """Everything one explanation reads, in a few queries."""

    namespace: str
    own: dict[str, StoredGraph]  # the misses' own keys, stored and parsed
    variants: dict[str, list[StoredGraph]]  # module -> the stored entries of that module, parsed
    component_misses: dict[str, list[ComponentMiss]]  # module -> misses with components, latest first
    tombstones: dict[str, TombstoneInfo]  # removed keys among the misses'
    ops: dict[str, str] = field(default_factory=dict)  # key -> sized ops text: the misses' own, and the
    # latest few stored entries of each of their structures (within MAX_OPS_TEXT)
    ops_cut: bool = False  # MAX_OPS_TEXT was reached: some bodies were not read


def read_facts(
    db: Database,
    namespace: str,
    keys: Sequence[str],
    modules: Sequence[str],
    *,
    until: dt.datetime | None = None,
) -> MissFacts:
    """The facts that explain misses of ``keys`` (of modules ``modules``, where known) in ``namespace``,
    reported at ``until`` at the latest (the stored entries compared with are those stored before it)."""
    joined = _graphs()
    own: dict[str, StoredGraph] = {}
    with db.reading() as connection:
        for part in chunked(list(keys)):
            rows = connection.execute(
                joined.where(EntryGraph.namespace == namespace, EntryGraph.key.in_(part))
            )
            own.update((row.key, StoredGraph(*row)) for row in rows)
        wanted = sorted({*modules, *(g.module for g in own.values() if g.module is not None)})
        variants = _variants(connection, namespace, wanted)
        ops, cut = _ops(connection, namespace, own, variants, until)
        component_misses: dict[str, list[ComponentMiss]] = defaultdict(list)
        for part in chunked(wanted):
            recorded = connection.execute(
                select(RunMiss.run_id, RunMiss.key, RunMiss.module, RunMiss.components, RunMiss.reported_at)
                .where(
                    RunMiss.namespace == namespace,
                    RunMiss.module.in_(part),
                    RunMiss.components.is_not(None),
                )
                .order_by(RunMiss.reported_at.desc())
                .limit(MAX_COMPONENT_MISSES)
            )
            for miss in recorded:
                if isinstance(miss.components, dict) and miss.module is not None:
                    component_misses[miss.module].append(
                        ComponentMiss(miss.run_id, miss.key, miss.module, miss.components, miss.reported_at)
                    )
    return MissFacts(
        namespace=namespace,
        own=own,
        variants=variants,
        component_misses=dict(component_misses),
        tombstones=tombstones_of(db, namespace, list(keys)),
        ops=ops,
        ops_cut=cut,
    )


_GRAPH_COLUMNS = (
    EntryGraph.key,
    EntryGraph.module,
    EntryGraph.shapes,
    Entry.created_at,
    EntryGraph.structure,
    EntryGraph.program,
    EntryGraph.whole,
)


def _graphs() -> Select[str, str | None, str | None, dt.datetime, str | None, str | None, str | None]:
    """The parsed graphs with their entries' creation times, as :class:`StoredGraph` takes them."""
    return select(*_GRAPH_COLUMNS).join(
        Entry, (Entry.namespace == EntryGraph.namespace) & (Entry.key == EntryGraph.key)
    )


def _variants(connection: Connection, namespace: str, modules: list[str]) -> dict[str, list[StoredGraph]]:
    """The stored entries of these modules, latest first: at most :data:`MAX_VARIANTS` of them and
    :data:`MAX_VARIANT_TEXT` characters of their shapes, :data:`VARIANT_PAGE` rows a query."""
    variants: dict[str, list[StoredGraph]] = defaultdict(list)
    read = text = 0
    for part in chunked(modules):
        after: tuple[dt.datetime, str] | None = None
        while read < MAX_VARIANTS and text < MAX_VARIANT_TEXT:
            stmt = _graphs().where(EntryGraph.namespace == namespace, EntryGraph.module.in_(part))
            if after is not None:
                stmt = stmt.where(tuple_(Entry.created_at, EntryGraph.key) < tuple_(*after))
            rows = connection.execute(
                stmt.order_by(Entry.created_at.desc(), EntryGraph.key.desc()).limit(
                    min(VARIANT_PAGE, MAX_VARIANTS - read)
                )
            ).all()
            for row in rows:
                graph = StoredGraph(*row)
                variants[str(graph.module)].append(graph)
                text += len(graph.shapes or "")
            read += len(rows)
            if len(rows) < VARIANT_PAGE:
                break
            after = (rows[-1].created_at, rows[-1].key)
    return dict(variants)


def _ops(
    connection: Connection,
    namespace: str,
    own: dict[str, StoredGraph],
    variants: dict[str, list[StoredGraph]],
    until: dt.datetime | None,
) -> tuple[dict[str, str], bool]:
    """The sized ops of the misses' own entries, then of the latest :data:`NEAREST_BODIES` stored before
    ``until`` of each of their structures (a query each), then of the latest :data:`NEAREST_BODIES` of
    ``variants`` (the modules' stored entries) at each miss's shapes with another structure, up to
    :data:`MAX_OPS_TEXT` characters in all; whether that bound cut what was read."""
    found: dict[str, str] = {}
    budget = [MAX_OPS_TEXT]

    def take(rows: Iterable[Any]) -> bool:
        for key, ops in rows:
            if ops is None or key in found:
                continue
            if len(ops) > budget[0]:
                return False
            found[key] = ops
            budget[0] -= len(ops)
        return True

    with_body = sorted(key for key, graph in own.items() if graph.structure)
    for part in chunked(with_body):
        ops_of = select(EntryGraph.key, EntryGraph.ops).where(
            EntryGraph.namespace == namespace, EntryGraph.key.in_(part)
        )
        if not take(connection.execute(ops_of)):
            return found, True
    structures: dict[tuple[str, str], int] = {}  # (module, structure) -> misses of it, most first
    for graph in own.values():
        if graph.structure and graph.module is not None:
            structures[(graph.module, graph.structure)] = (
                structures.get((graph.module, graph.structure), 0) + 1
            )
    for module, structure in sorted(structures, key=lambda s: (-structures[s], s)):
        nearest = (
            select(EntryGraph.key, EntryGraph.ops)
            .join(Entry, (Entry.namespace == EntryGraph.namespace) & (Entry.key == EntryGraph.key))
            .where(
                EntryGraph.namespace == namespace,
                EntryGraph.module == module,  # off ix_entry_graphs_module_signature
                EntryGraph.structure == structure,
                EntryGraph.ops.is_not(None),
                *([] if until is None else [Entry.created_at <= until]),
            )
            .order_by(Entry.created_at.desc())
            .limit(NEAREST_BODIES + 1)  # one more: the miss's own entry may be among them
        )
        if not take(connection.execute(nearest)):
            return found, True
    # and of the latest few stored at each miss's own input shapes with another structure (from the
    # module's variants already read, then one query per chunk of keys): a size at an edge (an empty slice)
    # adds or drops an op, which the reasons tell from another computation by these
    at_shapes: dict[tuple[str, str], list[StoredGraph]] = defaultdict(list)
    wanted = {(g.module, g.shapes) for g in own.values() if g.structure and g.module is not None and g.shapes}
    for module in sorted({module for module, _ in wanted}):
        for graph in variants.get(module, []):  # the latest first
            if (
                (module, graph.shapes) in wanted
                and graph.structure
                and (until is None or graph.created_at <= until)
            ):
                at_shapes[(module, str(graph.shapes))].append(graph)
    others: list[str] = []
    for graph in sorted(own.values(), key=lambda g: g.key):
        if graph.structure and graph.module is not None and graph.shapes:
            stored = at_shapes.get((graph.module, graph.shapes), [])
            others += [g.key for g in stored if g.structure != graph.structure][:NEAREST_BODIES]
    for part in chunked(sorted(set(others) - found.keys())):
        ops_of = select(EntryGraph.key, EntryGraph.ops).where(
            EntryGraph.namespace == namespace, EntryGraph.key.in_(part)
        )
        if not take(connection.execute(ops_of)):
            return found, True
    return found, False
