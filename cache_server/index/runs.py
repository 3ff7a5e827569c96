"""Run reports in the index (migration 0010): store a report, list and read runs, prune them.

:meth:`RunRepository.record` stores one report in one transaction: the run's row is created by its first
report (the token that sent it owns the id) or merged with the next ones (each number the larger of the two,
so a late report that arrives out of order cannot lower them), and the report's new misses are added while
the run holds fewer than :data:`~cache_protocol.runs.MAX_MISSES_PER_RUN`. The facts a miss's reason is
worked out from are read by :mod:`cache_server.index.miss_facts`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from sqlalchemy import ColumnElement, Select, delete, func, null, or_, select, update

from cache_protocol.runs import MAX_MISSES_PER_RUN
from cache_server.errors import RunConflict, RunOwned
from cache_server.index.database import Database, chunked
from cache_server.index.models import Namespace, Run, RunMiss

__all__ = [
    "MissRecord",
    "RunFilter",
    "RunInfo",
    "RunNumbers",
    "RunRecorded",
    "RunRepository",
    "RunTotals",
    "pattern_to_like",
]


@dataclass(frozen=True)
class RunNumbers:
    """A run's cumulative numbers (durations in whole milliseconds)."""

    warm_ms: int = 0
    warm_bytes: int = 0
    warm_entries: int = 0
    hits: int = 0
    misses: int = 0
    compile_ms: int = 0
    saved_ms: int = 0
    uploaded_entries: int = 0
    live_entries: int = 0
    load_failures: int = 0
    unverified_entries: int = 0

    def merged(self, other: RunNumbers) -> RunNumbers:
        """Each number the larger of the two (reports are cumulative: a smaller one is an older one)."""
        return RunNumbers(*(max(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)))


NUMBER_FIELDS = tuple(f.name for f in fields(RunNumbers))


@dataclass(frozen=True)
class RunInfo:
    """One run as the index holds it; ``misses_stored`` is how many of its misses have a row."""

    run_id: str
    namespace: str
    framework: str
    host: str
    process_index: int
    reported_by: str | None
    started_at: dt.datetime
    updated_at: dt.datetime
    ended_at: dt.datetime | None
    numbers: RunNumbers
    misses_stored: int = 0


@dataclass(frozen=True)
class MissRecord:
    """One compile a run reported, as stored (``reported_at`` orders a run's misses)."""

    key: str
    module: str | None
    components: dict[str, str] | None
    compile_ms: int | None
    load_failed: bool
    reported_at: dt.datetime | None = None


@dataclass(frozen=True)
class RunRecorded:
    """What storing one report did: the numbers before it (None: the run's first report) and after it,
    and how many of its misses were kept (the rest were over the run's bound, or reported before)."""

    run: RunInfo
    before: RunNumbers | None
    misses_kept: int


@dataclass(frozen=True)
class RunFilter:
    """Which runs a listing shows: each field None means any; ``patterns`` are a scoped token's namespace
    patterns (``*`` and ``?``), None for every namespace."""

    namespace: str | None = None
    framework: str | None = None
    host: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    patterns: tuple[str, ...] | None = None
    limit: int = 100


def pattern_to_like(pattern: str) -> str:
    """A namespace pattern (``*`` any run of characters, ``?`` one) as a LIKE pattern with ``\\`` escapes
    (the patterns' other characters are letters, digits, ``.``, ``_`` and ``-``: only ``_`` is special)."""
    return (
        pattern.replace("\\", "\\\\")
        .replace("%", "\\%")
        .replace("_", "\\_")
        .replace("*", "%")
        .replace("?", "_")
    )


def _namespace_matches(pattern: str, *, sqlite: bool) -> ColumnElement[bool]:
    """The runs whose namespace a token's pattern covers, case-sensitively as the token's check is
    (``fnmatchcase``). SQLite's LIKE ignores ASCII case, so there it is GLOB, where a pattern's ``*`` and
    ``?`` mean the same and its other characters (those of namespace names) stand for themselves."""
    if sqlite:
        return Run.namespace.op("GLOB")(pattern)
    return Run.namespace.like(pattern_to_like(pattern), escape="\\")


_RUN_COLUMNS = (
    Run.run_id,
    Run.namespace,
    Run.framework,
    Run.host,
    Run.process_index,
    Run.reported_by,
    Run.started_at,
    Run.updated_at,
    Run.ended_at,
    *(getattr(Run, name) for name in NUMBER_FIELDS),
)


def _run_info(row: Sequence[Any], misses_stored: int = 0) -> RunInfo:
    return RunInfo(
        run_id=row[0],
        namespace=row[1],
        framework=row[2],
        host=row[3],
        process_index=int(row[4]),
        reported_by=row[5],
        started_at=row[6],
        updated_at=row[7],
        ended_at=row[8],
        numbers=RunNumbers(*(int(v) for v in row[9:])),
        misses_stored=misses_stored,
    )


@dataclass(frozen=True)
class RunTotals:
    """The runs of a period together: how many, and what they reported (their hits are entries loaded
    from the cache, their misses compiles)."""

    runs: int
    hits: int
    misses: int
    compile_ms: int
    saved_ms: int


class RunRepository:
    """The runs and their misses."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def record(
        self,
        run: RunInfo,
        misses: Sequence[MissRecord],
        *,
        now: dt.datetime,
    ) -> RunRecorded:
        """Store one report of ``run`` (its numbers and identity; ``reported_by`` the token's id) and its new
        ``misses``, in one transaction. :class:`RunOwned` if another token reported this id first,
        :class:`RunConflict` if the run has another namespace or framework; nothing is stored then."""
        with self._db.transaction() as session:
            existing = session.execute(
                select(*_RUN_COLUMNS).where(Run.run_id == run.run_id).with_for_update()
            ).first()
            if existing is None:
                inserted = session.execute(
                    self._db.insert(Run)
                    .values(
                        run_id=run.run_id,
                        namespace=run.namespace,
                        framework=run.framework,
                        host=run.host,
                        process_index=run.process_index,
                        reported_by=run.reported_by,
                        started_at=run.started_at,
                        updated_at=now,
                        ended_at=run.ended_at,
                        **{name: getattr(run.numbers, name) for name in NUMBER_FIELDS},
                    )
                    .on_conflict_do_nothing(index_elements=["run_id"])
                    .returning(Run.run_id)
                ).first()
                if inserted is None:  # another report of the same run won the race: merge into it
                    existing = session.execute(
                        select(*_RUN_COLUMNS).where(Run.run_id == run.run_id).with_for_update()
                    ).first()
            before: RunNumbers | None = None
            stored = replace(run, updated_at=now)
            if existing is not None:
                old = _run_info(tuple(existing))
                if old.reported_by != run.reported_by:
                    raise RunOwned(
                        f"The run {run.run_id!r} was reported by another token; a run id belongs to the "
                        "token that reported it first."
                    )
                if (old.namespace, old.framework) != (run.namespace, run.framework):
                    raise RunConflict(
                        f"The run {run.run_id!r} was reported for namespace {old.namespace!r} and framework "
                        f"{old.framework!r}; a run keeps the namespace and framework of its first report."
                    )
                before = old.numbers
                ended = [t for t in (old.ended_at, run.ended_at) if t is not None]
                stored = replace(
                    old,
                    host=run.host,
                    process_index=run.process_index,
                    updated_at=now,
                    ended_at=max(ended) if ended else None,
                    numbers=old.numbers.merged(run.numbers),
                )
                session.execute(
                    update(Run)
                    .where(Run.run_id == run.run_id)
                    .values(
                        host=stored.host,
                        process_index=stored.process_index,
                        updated_at=now,
                        ended_at=stored.ended_at,
                        **{name: getattr(stored.numbers, name) for name in NUMBER_FIELDS},
                    )
                )
            held = session.execute(
                select(func.count()).select_from(RunMiss).where(RunMiss.run_id == run.run_id)
            ).scalar_one()
            room = max(0, MAX_MISSES_PER_RUN - held)
            kept = 0
            rows = [
                {
                    "run_id": run.run_id,
                    "key": miss.key,
                    "namespace": run.namespace,
                    "module": miss.module,
                    "components": null() if miss.components is None else miss.components,  # SQL NULL
                    "compile_ms": miss.compile_ms,
                    "load_failed": miss.load_failed,
                    # a report's misses in the order the client saw them: one microsecond apart
                    "reported_at": now + dt.timedelta(microseconds=index),
                }
                for index, miss in enumerate(misses[:room])
            ]
            for part in chunked(rows):
                kept += len(
                    session.execute(
                        self._db.insert(RunMiss)
                        .values(part)
                        .on_conflict_do_nothing(index_elements=["run_id", "key"])
                        .returning(RunMiss.key)
                    ).all()
                )
        return RunRecorded(run=replace(stored, misses_stored=held + kept), before=before, misses_kept=kept)

    def compile_ms_per_hit(self, namespace: str) -> float | None:
        """The compile time a hit of ``namespace`` saved on average (its counters), None before any hit."""
        with self._db.reading() as connection:
            row = connection.execute(
                select(Namespace.hits, Namespace.compile_ms_saved).where(Namespace.name == namespace)
            ).first()
        if row is None or not row.hits:
            return None
        return float(row.compile_ms_saved) / float(row.hits)

    def list_runs(self, query: RunFilter) -> list[RunInfo]:
        """The runs ``query`` asks for, the latest started first."""
        stmt: Select[tuple[object, ...]] = select(*_RUN_COLUMNS)
        conditions: list[ColumnElement[bool]] = []
        if query.namespace is not None:
            conditions.append(Run.namespace == query.namespace)
        if query.framework is not None:
            conditions.append(Run.framework == query.framework)
        if query.host is not None:
            conditions.append(Run.host == query.host)
        if query.since is not None:
            conditions.append(Run.started_at >= query.since)
        if query.until is not None:
            conditions.append(Run.started_at < query.until)
        if query.patterns is not None:
            sqlite = self._db.engine.dialect.name == "sqlite"
            conditions.append(or_(*(_namespace_matches(p, sqlite=sqlite) for p in query.patterns)))
        stmt = stmt.where(*conditions).order_by(Run.started_at.desc(), Run.run_id).limit(query.limit)
        with self._db.reading() as connection:
            return [_run_info(tuple(row)) for row in connection.execute(stmt)]

    def get_run(self, run_id: str) -> RunInfo | None:
        """One run, with how many of its misses have a row; None if there is none."""
        with self._db.reading() as connection:
            row = connection.execute(select(*_RUN_COLUMNS).where(Run.run_id == run_id)).first()
            if row is None:
                return None
            count = connection.execute(
                select(func.count()).select_from(RunMiss).where(RunMiss.run_id == run_id)
            ).scalar_one()
        return _run_info(tuple(row), int(count))

    def run_ids_starting(self, prefix: str, *, limit: int) -> list[tuple[str, str]]:
        """``(run id, namespace)`` of up to ``limit`` runs whose id starts with ``prefix``, by id (off the
        primary key: ``LIKE`` with the prefix's own ``_`` escaped)."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        stmt = (
            select(Run.run_id, Run.namespace)
            .where(Run.run_id.like(f"{escaped}%", escape="\\"), Run.run_id >= prefix)
            .order_by(Run.run_id)
            .limit(limit)
        )
        with self._db.reading() as connection:
            return [(run_id, namespace) for run_id, namespace in connection.execute(stmt)]

    def totals(self, *, since: dt.datetime, namespace: str | None = None) -> RunTotals:
        """What the runs started at or after ``since`` (of ``namespace``, if given) reported, summed (off
        ``ix_runs_started_at`` or ``ix_runs_namespace_started_at``)."""
        stmt = select(
            func.count(),
            func.coalesce(func.sum(Run.hits), 0),
            func.coalesce(func.sum(Run.misses), 0),
            func.coalesce(func.sum(Run.compile_ms), 0),
            func.coalesce(func.sum(Run.saved_ms), 0),
        ).where(Run.started_at >= since, *([] if namespace is None else [Run.namespace == namespace]))
        with self._db.reading() as connection:
            row = connection.execute(stmt).one()
        return RunTotals(*(int(value) for value in row))

    def misses_of(self, run_id: str) -> list[MissRecord]:
        """Every stored miss of a run, in the order it reported them."""
        stmt = (
            select(
                RunMiss.key,
                RunMiss.module,
                RunMiss.components,
                RunMiss.compile_ms,
                RunMiss.load_failed,
                RunMiss.reported_at,
            )
            .where(RunMiss.run_id == run_id)
            .order_by(RunMiss.reported_at, RunMiss.key)
        )
        with self._db.reading() as connection:
            return [MissRecord(*row) for row in connection.execute(stmt)]

    def prune(self, *, older_than: dt.datetime, keep: int) -> int:
        """Delete the runs last reported before ``older_than``, then the oldest beyond the newest ``keep``
        (their misses with them); returns how many runs went."""
        gone = 0
        with self._db.transaction() as session:
            old = list(session.scalars(select(Run.run_id).where(Run.updated_at < older_than)))
            cutoff = session.execute(
                select(Run.updated_at).order_by(Run.updated_at.desc()).offset(keep).limit(1)
            ).scalar()
            if cutoff is not None:
                old.extend(session.scalars(select(Run.run_id).where(Run.updated_at <= cutoff)))
            for part in chunked(sorted(set(old))):
                # misses first: SQLite enforces the cascade only with foreign keys on (they are, but say it)
                session.execute(delete(RunMiss).where(RunMiss.run_id.in_(part)))
                session.execute(delete(Run).where(Run.run_id.in_(part)))
                gone += len(part)
        return gone
