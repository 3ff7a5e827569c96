"""One namespace's parsed graphs with their shape variants, for the bucketing report (``GET /admin/graphs``).

Bounded whatever the namespace's size: the ``top`` graphs with the most distinct shape signatures are
the first ``top`` rows of the namespace in ``ix_graph_counts_ranking`` (``graph_counts``, kept by triggers
on ``entry_graphs``, migration 0013), and of each only ``per_graph`` variants' shapes texts are read (one
per signature, off ``ix_entry_graphs_module_signature``): the first in signature order, which is the order
of a digest of the shapes, so a capped read is a sample with no bias toward small or large shapes. With
each variant its entries' hits (``entries.hits``, as last flushed from the access counters; a primary-key
lookup per entry read), which weigh it in the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select

from cache_server.index.database import Database
from cache_server.index.models import Entry, EntryGraph, GraphCount, Namespace

__all__ = ["GraphBody", "GraphCounted", "GraphVariants", "GraphVariantsRepository"]


@dataclass(frozen=True)
class GraphCounted:
    """One graph (HLO module) of a namespace as ``graph_counts`` holds it: its distinct shape signatures
    (``variants``) and the entries that hold them."""

    module: str
    variants: int
    entries: int


@dataclass(frozen=True)
class GraphVariants:
    """One graph (HLO module) of a namespace: its distinct shape signatures (``variants``), the entries
    that hold them, the shapes texts of up to the cap of those variants (``shapes``) and each one's hits
    (``hits``: summed over its entries)."""

    module: str
    variants: int
    entries: int
    shapes: list[str]
    hits: list[int]


@dataclass(frozen=True)
class GraphBody:
    """One stored entry of a graph with its body (migration 0014): its shapes text, its structure digest
    and its sized ops as the index keeps them."""

    key: str
    shapes: str
    structure: str
    ops: str


class GraphVariantsRepository:
    """Reads a namespace's graphs and their variants from ``entry_graphs``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def namespace_exists(self, namespace: str) -> bool:
        with self._db.transaction() as session:
            return session.get(Namespace, namespace) is not None

    def unparseable(self, namespace: str, *, top: int = 5) -> list[tuple[str, int]]:
        """How many of ``namespace``'s entries could not be parsed, by reason, the commonest ``top`` first
        (off ``ix_entry_graphs_module_signature``: the rows of no module)."""
        count = func.count()
        stmt = (
            select(EntryGraph.unparseable, count)
            .where(EntryGraph.namespace == namespace, EntryGraph.module.is_(None))
            .group_by(EntryGraph.unparseable)
            .order_by(count.desc(), EntryGraph.unparseable)
            .limit(top)
        )
        with self._db.transaction() as session:
            return [(reason or "not recorded", int(n)) for reason, n in session.execute(stmt)]

    def ranked(self, namespace: str, *, top: int, module: str | None = None) -> list[GraphCounted]:
        """The ``top`` graphs of ``namespace`` with the most variants (then the most entries, then by
        name): the namespace's first rows in ``ix_graph_counts_ranking``."""
        stmt = (
            select(GraphCount.module, GraphCount.variants, GraphCount.entries)
            .where(GraphCount.namespace == namespace, GraphCount.entries > 0)
            .where(*([] if module is None else [GraphCount.module == module]))
            .order_by(GraphCount.variants.desc(), GraphCount.entries.desc(), GraphCount.module)
            .limit(top)
        )
        with self._db.transaction() as session:
            return [GraphCounted(m, int(v), int(n)) for m, v, n in session.execute(stmt).all()]

    def read_shapes(
        self, namespace: str, graphs: Sequence[GraphCounted], reads: Sequence[int]
    ) -> list[GraphVariants]:
        """Each of ``graphs`` with the shapes of the first ``reads[i]`` of its variants in signature
        order (one per signature) and their entries' hits."""
        found: list[GraphVariants] = []
        with self._db.transaction() as session:
            for graph, read in zip(graphs, reads, strict=True):
                rows = session.execute(
                    select(func.min(EntryGraph.shapes), func.sum(Entry.hits))
                    .join(Entry, (Entry.namespace == EntryGraph.namespace) & (Entry.key == EntryGraph.key))
                    .where(EntryGraph.namespace == namespace, EntryGraph.module == graph.module)
                    .group_by(EntryGraph.signature)
                    .order_by(EntryGraph.signature)
                    .limit(read)
                ).all()
                kept = [(t, int(h or 0)) for t, h in rows if t]
                found.append(
                    GraphVariants(
                        graph.module,
                        graph.variants,
                        graph.entries,
                        [t for t, _ in kept],
                        [h for _, h in kept],
                    )
                )
        return found

    def read_bodies(self, namespace: str, module: str, *, limit: int) -> list[GraphBody]:
        """Up to ``limit`` entries of ``module`` with a body, the latest stored first (off
        ``ix_entry_graphs_module_signature``, then the entries' primary key)."""
        stmt = (
            select(EntryGraph.key, EntryGraph.shapes, EntryGraph.structure, EntryGraph.ops)
            .join(Entry, (Entry.namespace == EntryGraph.namespace) & (Entry.key == EntryGraph.key))
            .where(
                EntryGraph.namespace == namespace,
                EntryGraph.module == module,
                EntryGraph.structure.is_not(None),
                EntryGraph.structure != "",
                EntryGraph.ops.is_not(None),
            )
            .order_by(Entry.created_at.desc())
            .limit(limit)
        )
        with self._db.transaction() as session:
            return [
                GraphBody(key, shapes, structure, ops)
                for key, shapes, structure, ops in session.execute(stmt)
                if shapes is not None and structure is not None and ops is not None
            ]
