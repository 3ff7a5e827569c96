"""One namespace's parsed graphs with their shape variants, for the bucketing report (``GET /admin/graphs``).

Bounded whatever the namespace's size: the ``top`` graphs with the most distinct shape signatures are
the first ``top`` rows of the namespace in ``ix_graph_counts_ranking`` (``graph_counts``, kept by triggers
on ``entry_graphs``, migration 0013), and of each only ``per_graph`` variants' shapes texts are read (one
per signature, off ``ix_entry_graphs_module_signature``): the first in signature order, which is the order
of a digest of the shapes, so a capped read is a sample with no bias toward small or large shapes. With
each variant its entries' hits (``entries.hits``, as last flushed from the access counters; a primary-key
lookup per entry read), which weigh it in the report. A graph's bodies (sized ops texts, up to 64 KiB each)
are read the latest parsed first (off ``ix_entry_graphs_bodies``, migration 0022), as many as the caller's
count and characters allow, chosen before any is loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import String, func, literal, select, text, union_all
from sqlalchemy.orm import Session

from cache_protocol.prefill import PREFILL_UPLOADER, UNVERIFIED
from cache_server.index.database import Database
from cache_server.index.graph_records import ranked_by_cost
from cache_server.index.models import PREFILLED, Entry, EntryGraph, Namespace, RunMiss

__all__ = [
    "BODIES_COUNTED",
    "SOURCES_READ",
    "GraphBodies",
    "GraphBody",
    "GraphCounted",
    "GraphVariants",
    "GraphVariantsRepository",
]

BODIES_COUNTED = 10_000  # a graph's entries with a body counted at most (the count reads their rows)
SOURCES_READ = 500  # a graph's entries whose reported sources are counted at most (their keys, any order)


@dataclass(frozen=True)
class GraphCounted:
    """One graph (HLO module) of a namespace as ``graph_counts`` holds it: its distinct shape signatures
    (``variants``), the entries that hold them and the compile times recorded with those (summed)."""

    module: str
    variants: int
    entries: int
    compile_seconds: float = 0.0


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
    compile_seconds: float = 0.0


@dataclass(frozen=True)
class GraphBody:
    """One stored entry of a graph with its body (migration 0014): its shapes text, its structure digest
    and its sized ops as the index keeps them."""

    key: str
    shapes: str
    structure: str
    ops: str
    source: str | None = None  # the file:line it was traced at, where the module names one


@dataclass(frozen=True)
class GraphBodies:
    """The bodies read of one graph (the latest first) and how many of its entries have one (``stored``,
    counted up to :data:`BODIES_COUNTED`)."""

    bodies: list[GraphBody]
    stored: int


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

    def prefilled(self, namespace: str) -> tuple[int, int]:
        """How many of ``namespace``'s entries a prefill stored (their uploader says so:
        :mod:`cache_protocol.prefill`), and how many of those unverified (off ``ix_entries_prefilled``,
        migration 0023: the prefilled entries alone, with their uploaders)."""
        unverified = Entry.uploader.like(literal(f"{PREFILL_UPLOADER} % {UNVERIFIED}", literal_execute=True))
        stmt = select(func.count(), func.count().filter(unverified)).where(
            Entry.namespace == namespace, text(PREFILLED)
        )
        with self._db.transaction() as session:
            row = session.execute(stmt).one()
        return int(row[0] or 0), int(row[1] or 0)

    def ranked(self, namespace: str, *, top: int, module: str | None = None) -> list[GraphCounted]:
        """The ``top`` graphs of ``namespace`` that cost most to compile (:func:`ranked_by_cost`: the
        compile seconds paid, then the compiles, then by name)."""
        with self._db.transaction() as session:
            ranked = ranked_by_cost(session, top, namespace, module)
        return [GraphCounted(g.module, g.variants, g.compiles, g.compile_ms / 1000) for g in ranked]

    def read_shapes(
        self, namespace: str, graphs: Sequence[GraphCounted], reads: Sequence[int]
    ) -> list[GraphVariants]:
        """Each of ``graphs`` with the shapes of the first ``reads[i]`` of its variants in signature
        order (one per signature) and their entries' hits (not summed for a graph of one variant, which
        weighs all there is whatever they are: its hits read 0)."""
        found: list[GraphVariants] = []
        of_entry = (Entry.namespace == EntryGraph.namespace) & (Entry.key == EntryGraph.key)
        with self._db.transaction() as session:
            for graph, read in zip(graphs, reads, strict=True):
                if graph.variants == 1 and read >= 1:
                    # One variant weighs all there is whatever its hits: one row's shapes, not a sum over all
                    # of its entries (a baked step's 16,000 rows joined to ``entries``: 45 ms at 1,000,000).
                    one = session.scalars(
                        select(EntryGraph.shapes)
                        .where(
                            EntryGraph.namespace == namespace,
                            EntryGraph.module == graph.module,
                            EntryGraph.signature.is_not(None),
                            EntryGraph.shapes.is_not(None),
                        )
                        .limit(1)
                    ).first()
                    kept = [(one, 0)] if one else []
                else:
                    rows = session.execute(
                        select(func.min(EntryGraph.shapes), func.sum(Entry.hits))
                        .join(Entry, of_entry)
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
                        graph.compile_seconds,
                    )
                )
        return found

    def module_shapes(
        self, namespace: str, module: str, *, after: str | None, limit: int
    ) -> list[tuple[str, str]]:
        """A page of ``module``'s variants in ``namespace``: (signature, shapes text) of at most ``limit``
        distinct signatures after ``after`` in signature order, one shapes text each (off
        ``ix_entry_graphs_module_signature``: a range of the index, whatever the graph's size)."""
        where = [EntryGraph.namespace == namespace, EntryGraph.module == module]
        if after is not None:
            where.append(EntryGraph.signature > after)
        stmt = (
            select(EntryGraph.signature, func.min(EntryGraph.shapes))
            .where(*where, EntryGraph.signature.is_not(None))
            .group_by(EntryGraph.signature)
            .order_by(EntryGraph.signature)
            .limit(limit)
        )
        with self._db.transaction() as session:
            return [(str(sig), str(text)) for sig, text in session.execute(stmt) if text]

    def sources(self, namespace: str, module: str, *, top: int = 3) -> list[tuple[str, int]]:
        """Where the jobs compiled ``module``: :meth:`sources_of` for one module."""
        return self.sources_of(namespace, [module], top=top).get(module, [])

    def sources_of(
        self, namespace: str, modules: Sequence[str], *, top: int = 3
    ) -> dict[str, list[tuple[str, int]]]:
        """Where the jobs compiled each of ``modules``: the ``top`` sources its runs reported
        (``file:line``), each with the entries of it compiled there, the most first; counted over at most
        :data:`SOURCES_READ` of its entries (off ``ix_entry_graphs_module_signature`` and
        ``ix_run_misses_namespace_key``). One query for all of them (each module's keys a limited part of
        a ``UNION ALL``), not one per module. A module no run named is absent."""
        if not modules:
            return {}
        parts = []
        for module in dict.fromkeys(modules):
            limited = (
                select(literal(module, String).label("module"), EntryGraph.key.label("key"))
                .where(EntryGraph.namespace == namespace, EntryGraph.module == module)
                .limit(SOURCES_READ)
                .subquery()
            )
            parts.append(select(limited.c.module, limited.c.key))
        keys = union_all(*parts).subquery()
        count = func.count(func.distinct(RunMiss.key))
        stmt = (
            select(keys.c.module, RunMiss.source, count)
            .join(keys, (RunMiss.namespace == namespace) & (RunMiss.key == keys.c.key))
            .where(RunMiss.source.is_not(None))
            .group_by(keys.c.module, RunMiss.source)
        )
        found: dict[str, list[tuple[str, int]]] = {}
        with self._db.transaction() as session:
            for module, source, n in session.execute(stmt):
                found.setdefault(str(module), []).append((str(source), int(n)))
        return {
            module: sorted(counts, key=lambda pair: (-pair[1], pair[0]))[:top]
            for module, counts in found.items()
        }

    def read_bodies(
        self, namespace: str, module: str, *, limit: int, max_text: int, counted: bool = True
    ) -> GraphBodies:
        """The latest parsed entries of ``module`` with a body: at most ``limit`` of them, and of those only
        the first whose ops texts fit ``max_text`` characters in all (the bounds are kept by the queries:
        the latest ``limit`` keys are the last of the module's range in ``ix_entry_graphs_bodies``, chosen
        with the length of each ops text before any is read; only the texts that fit are read; none at all
        when ``max_text`` is 0). With how many entries of ``module`` have a body (counted up to
        :data:`BODIES_COUNTED`, off that index alone; not counted unless ``counted``: then only how many
        were found)."""
        # The partial index's own condition (migration 0022), so both databases read the module's range of it.
        has_body = (
            EntryGraph.namespace == namespace,
            EntryGraph.module == module,
            EntryGraph.ops.is_not(None),
        )
        latest = (
            select(EntryGraph.key.label("key"), EntryGraph.parsed_at.label("parsed_at"))
            .where(*has_body)
            .order_by(EntryGraph.parsed_at.desc(), EntryGraph.key.desc())
            .limit(limit)
            .subquery()
        )
        sized = (
            select(
                EntryGraph.key,
                EntryGraph.shapes,
                EntryGraph.structure,
                func.length(EntryGraph.ops),
                EntryGraph.source,
            )
            .join(latest, (EntryGraph.namespace == namespace) & (EntryGraph.key == latest.c.key))
            .order_by(latest.c.parsed_at.desc(), latest.c.key.desc())
        )
        with_body = select(EntryGraph.key).where(*has_body).limit(BODIES_COUNTED).subquery()
        count = select(func.count()).select_from(with_body)
        if limit <= 0 or max_text <= 0:
            with self._db.transaction() as session:
                return GraphBodies([], int(session.execute(count).scalar_one()))
        with self._db.transaction() as session:
            rows = session.execute(sized).all()
            chosen: list[tuple[str, str, str, str | None]] = []
            left = max_text
            for key, shapes, structure, length, source in rows:
                left -= int(length or 0)
                if left < 0:
                    break
                if shapes is not None and structure:
                    chosen.append((key, shapes, structure, source))
            stored = len(rows)
            if stored >= limit and counted:
                stored = int(session.execute(count).scalar_one())
            texts = self._ops_texts(session, namespace, [key for key, _, _, _ in chosen])
        bodies = [
            GraphBody(key, shapes, structure, texts[key], source)
            for key, shapes, structure, source in chosen
            if key in texts
        ]
        return GraphBodies(bodies, stored)

    @staticmethod
    def _ops_texts(session: Session, namespace: str, keys: list[str]) -> dict[str, str]:
        """The ops texts of ``keys`` (entries of ``namespace``), by key."""
        if not keys:
            return {}
        stmt = select(EntryGraph.key, EntryGraph.ops).where(
            EntryGraph.namespace == namespace, EntryGraph.key.in_(keys)
        )
        return {key: ops for key, ops in session.execute(stmt) if ops is not None}
