"""What parsing each stored entry found (``entry_graphs``): the entries still to parse, recording what was
found, and the graphs that cost most to compile: :class:`GraphRepository`, the repository of the parsing
service (:mod:`cache_server.parsing.service`), which the stats read the top graphs from too."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cache_server.index.database import Database
from cache_server.index.models import Entry, EntryGraph, GraphCount

__all__ = [
    "GraphGroup",
    "GraphRecord",
    "GraphRepository",
    "RankedGraph",
    "ranked_by_cost",
]


@dataclass(frozen=True)
class GraphRecord:
    """What parsing one entry found; ``module`` None means "not parseable". ``structure``, ``program``,
    ``whole`` and ``ops`` are its body (:class:`cache_server.parsing.instructions.Body`); ``structure`` is
    ``""`` where there is none (a module too large to walk); NULL only in rows parsed before migration
    0014, which are parsed again."""

    namespace: str
    key: str
    module: str | None
    signature: str | None = None
    shapes: str | None = None
    source: str | None = None
    structure: str | None = ""
    program: str | None = None
    whole: str | None = None
    ops: str | None = None
    unparseable: str | None = None  # with no module: why the parser could not read it


@dataclass(frozen=True)
class GraphGroup:
    """Stored entries of one HLO module in one namespace, and how many distinct shape signatures they have."""

    namespace: str
    module: str
    variants: int
    entries: int
    bytes: int
    hits: int
    source: str | None
    examples: list[str]
    compile_seconds: float = 0.0  # the compile times recorded with its entries, summed


@dataclass(frozen=True)
class RankedGraph:
    """One graph in the ranking by cost: the compile ms recorded with its entries (summed), its entries
    (each one compile paid) and its distinct shape signatures."""

    namespace: str
    module: str
    compile_ms: int
    compiles: int
    variants: int


def ranked_by_cost(
    session: Session, limit: int, namespace: str | None = None, module: str | None = None
) -> list[RankedGraph]:
    """The ``limit`` graphs that cost most to compile: the compile times recorded with their entries
    (``entries.compile_time_ms``, summed; an entry with none counts 0), then their entries, then by name;
    variants are a column, not the order. Read off ``graph_counts`` (its ``compile_ms`` is kept by triggers,
    migration 0021; ``ix_graph_counts_cost``), a read of ``limit`` rows whatever the namespace holds."""
    where = [GraphCount.entries > 0]
    where += [] if namespace is None else [GraphCount.namespace == namespace]
    where += [] if module is None else [GraphCount.module == module]
    stmt = (
        select(
            GraphCount.namespace,
            GraphCount.module,
            GraphCount.compile_ms,
            GraphCount.entries,
            GraphCount.variants,
        )
        .where(*where)
        .order_by(
            GraphCount.compile_ms.desc(), GraphCount.entries.desc(), GraphCount.namespace, GraphCount.module
        )
        .limit(limit)
    )
    rows = session.execute(stmt).all()
    return [RankedGraph(ns, str(m), int(ms or 0), int(n), int(v)) for ns, m, ms, n, v in rows]


_JOINED = (EntryGraph.namespace == Entry.namespace) & (EntryGraph.key == Entry.key)


class GraphRepository:
    """Queries of ``entry_graphs`` and ``graph_counts``, over the shared :class:`Database`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def unparsed_entries(self, limit: int) -> list[tuple[str, str]]:
        """Entries nobody has tried to parse yet, then graphs parsed before their bodies were read
        (migration 0014: a module, no ``structure``), to be parsed again."""
        stmt = (
            select(Entry.namespace, Entry.key)
            .outerjoin(EntryGraph, (EntryGraph.namespace == Entry.namespace) & (EntryGraph.key == Entry.key))
            .where(EntryGraph.key.is_(None))
            .limit(limit)
        )
        stale = (
            select(EntryGraph.namespace, EntryGraph.key)
            .where(EntryGraph.module.is_not(None), EntryGraph.structure.is_(None))
            .limit(limit)
        )
        with self._db.transaction() as session:
            found = [(ns, key) for ns, key in session.execute(stmt)]
            if len(found) < limit:
                found += [(ns, key) for ns, key in session.execute(stale.limit(limit - len(found)))]
            return found

    def record_graph(self, record: GraphRecord) -> bool:
        """Keep what parsing found. False if the entry is gone by now (evicted while it was parsed)."""
        try:
            with self._db.transaction() as session:
                stmt = self._db.insert(EntryGraph).values(**asdict(record))
                session.execute(_keep_body(stmt))
        except IntegrityError:
            return False
        return True

    def record_graphs(self, records: list[GraphRecord]) -> int:
        """Keep what parsing found for many entries, in one transaction; an entry gone by now (evicted
        while it was parsed) is skipped. Returns how many were recorded."""
        if not records:
            return 0
        try:
            with self._db.transaction() as session:
                # One statement executed for many rows, on the table: compiled once and cached (a VALUES
                # list of 50 rows was compiled anew for every batch, most of the server's share of parsing)
                stmt = _keep_body(self._db.insert(EntryGraph.__table__))
                session.execute(stmt, [asdict(record) for record in records])
        except IntegrityError:  # some entry is gone: one at a time, skipping those
            return sum(self.record_graph(record) for record in records)
        return len(records)

    def top_graphs(self, limit: int, namespace: str | None = None, examples: int = 3) -> list[GraphGroup]:
        """The modules that cost most to compile (:func:`ranked_by_cost`), with a few of their shapes as
        examples. The entries' bytes and hits are summed for the ``limit`` groups shown only.
        """
        joined = _JOINED
        groups: list[GraphGroup] = []
        with self._db.transaction() as session:
            for ns, module, paid_ms, n_entries, n_variants in (
                (g.namespace, g.module, g.compile_ms, g.compiles, g.variants)
                for g in ranked_by_cost(session, limit, namespace)
            ):
                of_group = (EntryGraph.namespace == ns) & (EntryGraph.module == module)
                size, hits, source = session.execute(
                    select(func.sum(Entry.size), func.sum(Entry.hits), func.max(EntryGraph.source))
                    .join(Entry, joined)
                    .where(of_group)
                ).one()
                shown = session.scalars(
                    select(EntryGraph.shapes)
                    .where(of_group)
                    .group_by(EntryGraph.shapes)
                    .order_by(EntryGraph.shapes)
                    .limit(examples)
                ).all()
                groups.append(
                    GraphGroup(
                        namespace=ns,
                        module=str(module),
                        variants=int(n_variants),
                        entries=int(n_entries),
                        bytes=int(size or 0),
                        hits=int(hits or 0),
                        source=source,
                        examples=[text for text in shown if text],
                        compile_seconds=int(paid_ms) / 1000,
                    )
                )
        return groups


def _keep_body(stmt: Any) -> Any:
    """An insert of graph records that, for a row already there without a body (parsed before migration
    0014), fills in the body and leaves the rest (its module and signature: 0013's counts) as it is."""
    excluded = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=["namespace", "key"],
        set_={name: getattr(excluded, name) for name in ("structure", "program", "whole", "ops")},
        where=EntryGraph.__table__.c.structure.is_(None),
    )
