"""What the index knows that explains a compile (:mod:`cache_server.runs.reasons` reads it through here):
the graphs parsed from stored entries, the variants of a module stored in a namespace, the JAX cache-key
components earlier misses recorded, and the tombstones of removed keys."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection, select

from cache_server.index.database import Database, chunked
from cache_server.index.models import Entry, EntryGraph, RunMiss
from cache_server.index.tombstones import TombstoneInfo, tombstones_of

__all__ = ["ComponentMiss", "MissFacts", "StoredGraph", "read_facts"]

MAX_VARIANTS = 20_000
"""Bound on the stored variants read for one explanation (the seed's busiest graph has a few thousand)."""
MAX_COMPONENT_MISSES = 5_000
"""Bound on the earlier misses with JAX cache-key components read for one explanation."""


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
    ops: dict[str, str] = field(default_factory=dict)  # key -> sized ops text: the misses' own, and
    # the stored entries of their modules that share a miss's structure


def read_facts(db: Database, namespace: str, keys: Sequence[str], modules: Sequence[str]) -> MissFacts:
    """The facts that explain misses of ``keys`` (of modules ``modules``, where known) in ``namespace``."""
    graph_columns = (
        EntryGraph.key,
        EntryGraph.module,
        EntryGraph.shapes,
        Entry.created_at,
        EntryGraph.structure,
        EntryGraph.program,
        EntryGraph.whole,
    )
    joined = select(*graph_columns).join(
        Entry, (Entry.namespace == EntryGraph.namespace) & (Entry.key == EntryGraph.key)
    )
    own: dict[str, StoredGraph] = {}
    with db.reading() as connection:
        for part in chunked(list(keys)):
            rows = connection.execute(
                joined.where(EntryGraph.namespace == namespace, EntryGraph.key.in_(part))
            )
            own.update((row.key, StoredGraph(*row)) for row in rows)
        wanted = sorted({*modules, *(g.module for g in own.values() if g.module is not None)})
        variants: dict[str, list[StoredGraph]] = defaultdict(list)
        read = 0
        for part in chunked(wanted):
            rows = connection.execute(
                joined.where(EntryGraph.namespace == namespace, EntryGraph.module.in_(part))
                .order_by(Entry.created_at.desc())
                .limit(MAX_VARIANTS - read)
            )
            for row in rows:
                variants[row.module].append(StoredGraph(*row))
                read += 1
            if read >= MAX_VARIANTS:
                break
        ops = _ops(connection, namespace, own, wanted)
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
        variants=dict(variants),
        component_misses=dict(component_misses),
        tombstones=tombstones_of(db, namespace, list(keys)),
        ops=ops,
    )


def _ops(
    connection: Connection, namespace: str, own: dict[str, StoredGraph], modules: list[str]
) -> dict[str, str]:
    """The sized ops of the misses' own entries and of the stored entries that share a miss's structure
    (the latest :data:`MAX_VARIANTS` of them)."""
    structures = sorted({g.structure for g in own.values() if g.structure})
    if not structures:
        return {}
    found: dict[str, str] = {}
    for module_part in chunked(modules):  # off ix_entry_graphs_module_signature
        for part in chunked(structures):
            rows = connection.execute(
                select(EntryGraph.key, EntryGraph.ops)
                .join(Entry, (Entry.namespace == EntryGraph.namespace) & (Entry.key == EntryGraph.key))
                .where(
                    EntryGraph.namespace == namespace,
                    EntryGraph.module.in_(module_part),
                    EntryGraph.structure.in_(part),
                    EntryGraph.ops.is_not(None),
                )
                .order_by(Entry.created_at.desc())
                .limit(MAX_VARIANTS - len(found))
            )
            found.update((key, ops) for key, ops in rows if ops is not None)
            if len(found) >= MAX_VARIANTS:
                return found
    return found
