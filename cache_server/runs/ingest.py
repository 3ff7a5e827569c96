"""Run reports as a service: store one (``POST /v1/runs``), list runs, show one with the reason of each miss.

A report carries the run's cumulative numbers: the index keeps, per number, the larger of the stored and the
reported (:meth:`~cache_server.index.runs.RunRepository.record`), so the Prometheus counters grow by the
difference between a run's consecutive reports, and never shrink. The compile time a run's hits saved is
estimated from its namespace's counters (the compile time recorded with the entries served, per hit).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass

from cache_server import metrics
from cache_server.domain import Clock, utcnow
from cache_server.errors import RunNotFound
from cache_server.index.database import Database
from cache_server.index.miss_facts import read_facts
from cache_server.index.runs import MissRecord, RunFilter, RunInfo, RunNumbers, RunRepository
from cache_server.runs.reasons import ExplainedMiss, explain
from cache_server.runs.variants import VariantsCache

__all__ = ["RunDetail", "RunReport", "RunService"]


@dataclass(frozen=True)
class RunReport:
    """One report as the client sent it (checked by the API's schema; seconds as numbers)."""

    run_id: str
    namespace: str
    framework: str
    host: str
    process_index: int
    started_at: dt.datetime
    ended_at: dt.datetime | None
    warm_seconds: float
    warm_bytes: int
    warm_entries: int
    hits: int
    misses: int
    compile_seconds: float
    uploaded_entries: int
    live_entries: int
    load_failures: int
    unverified_entries: int
    new_misses: Sequence[MissRecord]


@dataclass(frozen=True)
class RunDetail:
    """A run, its misses (up to the limit asked) each with its reason, and how many there are."""

    run: RunInfo
    misses: list[ExplainedMiss]
    misses_total: int
    misses_explained: int


def _ms(seconds: float) -> int:
    return math.floor(seconds * 1000.0 + 0.5)


class RunService:
    """Stores run reports and explains them."""

    def __init__(self, database: Database, *, clock: Clock = utcnow) -> None:
        self._repository = RunRepository(database)
        self._database = database
        self._clock = clock
        self._variants = VariantsCache()

    def report(self, report: RunReport, *, reported_by: str | None) -> RunInfo:
        """Store ``report`` for the token ``reported_by`` (None with auth off) and count it in the metrics;
        :class:`~cache_server.errors.RunOwned` / :class:`~cache_server.errors.RunConflict` store nothing."""
        per_hit = self._repository.compile_ms_per_hit(report.namespace)
        saved = int(report.hits * per_hit) if per_hit is not None else 0
        numbers = RunNumbers(
            warm_ms=_ms(report.warm_seconds),
            warm_bytes=report.warm_bytes,
            warm_entries=report.warm_entries,
            hits=report.hits,
            misses=report.misses,
            compile_ms=_ms(report.compile_seconds),
            saved_ms=min(saved, 2**62),
            uploaded_entries=report.uploaded_entries,
            live_entries=report.live_entries,
            load_failures=report.load_failures,
            unverified_entries=report.unverified_entries,
        )
        now = self._clock()
        run = RunInfo(
            run_id=report.run_id,
            namespace=report.namespace,
            framework=report.framework,
            host=report.host,
            process_index=report.process_index,
            reported_by=reported_by,
            started_at=report.started_at,
            updated_at=now,
            ended_at=report.ended_at,
            numbers=numbers,
        )
        recorded = self._repository.record(run, report.new_misses, now=now)
        _count(report.framework, recorded.before, recorded.run.numbers)
        return recorded.run

    def list_runs(self, query: RunFilter) -> list[RunInfo]:
        """The runs ``query`` asks for, the latest started first."""
        return self._repository.list_runs(query)

    def detail(self, run_id: str, *, patterns: tuple[str, ...] | None, limit: int) -> RunDetail:
        """A run with its first ``limit`` misses explained; :class:`RunNotFound` if there is no such run or
        it is in a namespace ``patterns`` (a scoped token's) do not cover."""
        run = self._repository.get_run(run_id)
        if run is None or (patterns is not None and not _covered(run.namespace, patterns)):
            raise RunNotFound(f"No run {run_id!r} was reported (or it is not one this token may see).")
        stored = self._repository.misses_of(run_id)
        listed = stored[:limit]
        modules = sorted({m.module for m in listed if m.module is not None})
        facts = read_facts(self._database, run.namespace, [m.key for m in listed], modules)
        explained = explain(listed, [m.key for m in stored], facts, self._variants)
        return RunDetail(
            run=run,
            misses=explained,
            misses_total=max(run.numbers.misses, len(stored)),
            misses_explained=sum(1 for m in explained if m.reason != "unknown"),
        )


def _covered(namespace: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(namespace, p) for p in patterns)


def _count(framework: str, before: RunNumbers | None, after: RunNumbers) -> None:
    """Grow the run counters by what this report added to the run's numbers."""
    old = before or RunNumbers()
    if before is None:
        metrics.RUNS.labels(framework).inc()
    if (hits := after.hits - old.hits) > 0:
        metrics.RUN_HITS.labels(framework).inc(hits)
    if (misses := after.misses - old.misses) > 0:
        metrics.RUN_MISSES.labels(framework).inc(misses)
    if (compile_ms := after.compile_ms - old.compile_ms) > 0:
        metrics.RUN_COMPILE_SECONDS.labels(framework).inc(compile_ms / 1000.0)
    if (saved_ms := after.saved_ms - old.saved_ms) > 0:
        metrics.RUN_SAVED_SECONDS.labels(framework).inc(saved_ms / 1000.0)
