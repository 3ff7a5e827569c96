"""Run reports in the index (migration 0010): store a run's row and its misses, list and read runs, prune
them.

The index only stores and reads: what a report changes (who owns a run, what it may not change, how its
numbers merge, how many misses it keeps) is the service's (:mod:`cache_server.runs.ingest`), which holds
one run's row in a transaction (:meth:`RunRepository.holding`) while it reads and writes it. The facts a
miss's reason is worked out from are read by :mod:`cache_server.index.miss_facts`.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import ColumnElement, Select, delete, func, null, select, update
from sqlalchemy.orm import Session

from cache_server.domain.runs import NUMBER_FIELDS, MissRecord, RunFilter, RunInfo, RunNumbers, RunTotals
from cache_server.index.database import Database, chunked
from cache_server.index.models import Entry, Run, RunMiss, run_number
from cache_server.index.patterns import scope_matches, starts_with

__all__ = ["HeldRun", "RunRepository"]


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
    Run.runtime,
    *(run_number(name) for name in NUMBER_FIELDS),
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
        runtime=row[9],
        numbers=RunNumbers.of_row(row[10:]),
        misses_stored=misses_stored,
    )


class HeldRun:
    """One run's row within a transaction: read (and locked), inserted or updated, and its misses added.
    Whatever raises within :meth:`RunRepository.holding` stores nothing."""

    def __init__(self, db: Database, session: Session, run_id: str) -> None:
        self._db = db
        self._session = session
        self.run_id = run_id

    def read(self) -> RunInfo | None:
        """The run as stored (its row locked until the transaction ends), None if there is none."""
        row = self._session.execute(
            select(*_RUN_COLUMNS).where(Run.run_id == self.run_id).with_for_update()
        ).first()
        return None if row is None else _run_info(tuple(row))

    def insert(self, run: RunInfo) -> bool:
        """Store ``run`` as a new row; False if another report of the same run stored one first."""
        inserted = self._session.execute(
            self._db.insert(Run)
            .values(**_row(run), run_id=run.run_id, namespace=run.namespace, framework=run.framework)
            .on_conflict_do_nothing(index_elements=["run_id"])
            .returning(Run.run_id)
        ).first()
        return inserted is not None

    def update(self, run: RunInfo) -> None:
        """Store ``run``'s host, process, times and numbers over its row."""
        self._session.execute(update(Run).where(Run.run_id == self.run_id).values(**_row(run)))

    def misses_held(self) -> int:
        """How many of the run's misses have a row."""
        return int(
            self._session.execute(
                select(func.count()).select_from(RunMiss).where(RunMiss.run_id == self.run_id)
            ).scalar_one()
        )

    def runs_of_token(self, token_id: str) -> int:
        """How many runs the token with this id reported (first)."""
        return int(
            self._session.execute(
                select(func.count()).select_from(Run).where(Run.reported_by == token_id)
            ).scalar_one()
        )

    def misses_of_token(self, token_id: str) -> int:
        """How many misses the runs of the token with this id keep."""
        stmt = (
            select(func.count())
            .select_from(RunMiss)
            .join(Run, Run.run_id == RunMiss.run_id)
            .where(Run.reported_by == token_id)
        )
        return int(self._session.execute(stmt).scalar_one())

    def misses_of_namespace(self, namespace: str) -> int:
        """How many misses the runs of ``namespace`` keep."""
        stmt = select(func.count()).select_from(RunMiss).where(RunMiss.namespace == namespace)
        return int(self._session.execute(stmt).scalar_one())

    def add_misses(self, namespace: str, misses: Sequence[MissRecord], *, now: dt.datetime) -> int:
        """Store ``misses`` (each a microsecond after the last: the order reported) but those the run holds
        already; returns how many were stored."""
        rows = [
            {
                "run_id": self.run_id,
                "key": miss.key,
                "namespace": namespace,
                "module": miss.module,
                "components": null() if miss.components is None else miss.components,  # SQL NULL
                "compile_ms": miss.compile_ms,
                "load_failed": miss.load_failed,
                "reported_at": now + dt.timedelta(microseconds=index),
                "source": miss.source,
            }
            for index, miss in enumerate(misses)
        ]
        kept = 0
        for part in chunked(rows):
            kept += len(
                self._session.execute(
                    self._db.insert(RunMiss)
                    .values(part)
                    .on_conflict_do_nothing(index_elements=["run_id", "key"])
                    .returning(RunMiss.key)
                ).all()
            )
        return kept


def _row(run: RunInfo) -> dict[str, Any]:
    """The columns of ``run`` a report may change."""
    return {
        "host": run.host,
        "process_index": run.process_index,
        "reported_by": run.reported_by,
        "started_at": run.started_at,
        "updated_at": run.updated_at,
        "ended_at": run.ended_at,
        "runtime": run.runtime,
        **run.numbers.as_dict(),
    }


_SUMS = tuple(
    func.coalesce(func.sum(run_number(name)), 0) for name in ("hits", "misses", "compile_ms", "saved_ms")
)
"""The numbers :class:`~cache_server.domain.runs.RunTotals` sums, as SQL (after the count of runs)."""


class RunRepository:
    """The runs and their misses."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @contextmanager
    def holding(self, run_id: str) -> Iterator[HeldRun]:
        """The run ``run_id``'s row in one transaction: committed when the block ends, rolled back (nothing
        stored) when it raises."""
        with self._db.transaction() as session:
            yield HeldRun(self._db, session, run_id)

    def compile_ms_of(self, namespace: str, keys: Sequence[str]) -> int:
        """The compile time recorded with these entries of ``namespace``, summed (an entry without one, or
        not stored, adds 0): what a run's hits of them saved."""
        total = 0
        if not keys:
            return 0
        with self._db.reading() as connection:
            for part in chunked(sorted(set(keys))):
                stmt = select(func.coalesce(func.sum(Entry.compile_time_ms), 0)).where(
                    Entry.namespace == namespace, Entry.key.in_(part)
                )
                total += int(connection.execute(stmt).scalar_one() or 0)
        return total

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
            conditions.append(scope_matches(self._db, Run.namespace, query.patterns))
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

    def run_ids_starting(
        self, prefix: str, *, patterns: Sequence[str] | None, limit: int
    ) -> list[tuple[str, str]]:
        """``(run id, namespace)`` of up to ``limit`` runs whose id starts with ``prefix`` (exactly:
        :func:`~cache_server.index.patterns.starts_with`) in a namespace ``patterns`` cover (any with None),
        by id: the limit counts only runs the token may see, so another namespace's runs neither hide nor
        show through the answer."""
        conditions = [starts_with(self._db, Run.run_id, prefix)]
        if patterns is not None:
            conditions.append(scope_matches(self._db, Run.namespace, patterns))
        stmt = select(Run.run_id, Run.namespace).where(*conditions).order_by(Run.run_id).limit(limit)
        with self._db.reading() as connection:
            return [(run_id, namespace) for run_id, namespace in connection.execute(stmt)]

    def totals(self, *, since: dt.datetime, namespace: str | None = None) -> RunTotals:
        """What the runs started at or after ``since`` (of ``namespace``, if given) reported, summed (off
        ``ix_runs_started_at`` or ``ix_runs_namespace_started_at``)."""
        conditions = [Run.started_at >= since]
        if namespace is not None:
            conditions.append(Run.namespace == namespace)
        stmt = select(func.count(), *_SUMS).where(*conditions)
        with self._db.reading() as connection:
            row = connection.execute(stmt).one()
        return RunTotals(*(int(value) for value in row))

    def daily(self, *, since: dt.datetime, namespace: str | None = None) -> dict[dt.date, RunTotals]:
        """:meth:`totals` per UTC day the runs started on, from ``since`` on (days without runs left
        out): one grouped query."""
        if self._db.engine.dialect.name == "postgresql":
            day: ColumnElement[Any] = func.to_char(func.timezone("UTC", Run.started_at), "YYYY-MM-DD")
        else:  # SQLite keeps the UTC time as text, "YYYY-MM-DD HH:MM:SS..." (UtcDateTime)
            day = func.substr(Run.started_at, 1, 10)
        conditions = [Run.started_at >= since]
        if namespace is not None:
            conditions.append(Run.namespace == namespace)
        stmt = select(day, func.count(), *_SUMS).where(*conditions).group_by(day)
        with self._db.reading() as connection:
            return {
                dt.date.fromisoformat(str(found)): RunTotals(*(int(value) for value in values))
                for found, *values in connection.execute(stmt)
            }

    def totals_by_namespace(self, *, since: dt.datetime, namespaces: Sequence[str]) -> dict[str, RunTotals]:
        """:meth:`totals` of each of ``namespaces`` (one grouped query per part of them); a namespace
        without runs is left out."""
        found: dict[str, RunTotals] = {}
        with self._db.reading() as connection:
            for part in chunked(sorted(set(namespaces))):
                stmt = (
                    select(Run.namespace, func.count(), *_SUMS)
                    .where(Run.started_at >= since, Run.namespace.in_(part))
                    .group_by(Run.namespace)
                )
                for name, *values in connection.execute(stmt):
                    found[str(name)] = RunTotals(*(int(value) for value in values))
        return found

    def miss_keys(self, run_id: str) -> list[str]:
        """The keys of a run's stored misses, in the order it reported them (no more of each row: cheap)."""
        stmt = select(RunMiss.key).where(RunMiss.run_id == run_id).order_by(RunMiss.reported_at, RunMiss.key)
        with self._db.reading() as connection:
            return list(connection.scalars(stmt))

    def misses_of(self, run_id: str, *, offset: int = 0, limit: int | None = None) -> list[MissRecord]:
        """A run's stored misses in the order it reported them: every one, or ``limit`` from ``offset``."""
        stmt = (
            select(
                RunMiss.key,
                RunMiss.module,
                RunMiss.components,
                RunMiss.compile_ms,
                RunMiss.load_failed,
                RunMiss.reported_at,
                RunMiss.source,
            )
            .where(RunMiss.run_id == run_id)
            .order_by(RunMiss.reported_at, RunMiss.key)
            .offset(offset)
            .limit(limit)
        )
        with self._db.reading() as connection:
            return [MissRecord(*row) for row in connection.execute(stmt)]

    def keep_reasons(self, run_id: str, reasons: Mapping[str, str]) -> None:
        """Keep the reason a run's detail gave each of these misses (key -> reason), one statement per
        reason; misses gone meanwhile (their run pruned) are passed over."""
        by_reason: dict[str, list[str]] = defaultdict(list)
        for key, reason in reasons.items():
            by_reason[reason].append(key)
        with self._db.transaction() as session:
            for reason, keys in sorted(by_reason.items()):
                for part in chunked(sorted(keys)):
                    session.execute(
                        update(RunMiss)
                        .where(RunMiss.run_id == run_id, RunMiss.key.in_(part))
                        .values(reason=reason)
                    )

    def reason_counts(self, run_id: str) -> dict[str, int]:
        """How many of a run's misses were given each reason (those its detail has listed so far)."""
        stmt = (
            select(RunMiss.reason, func.count())
            .where(RunMiss.run_id == run_id, RunMiss.reason.is_not(None))
            .group_by(RunMiss.reason)
        )
        with self._db.reading() as connection:
            return {str(reason): int(count) for reason, count in connection.execute(stmt)}

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
