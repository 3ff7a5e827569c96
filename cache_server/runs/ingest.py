"""Run reports as a service: store one (``POST /v1/runs``), list runs, show one with the reason of each miss.

A report carries the run's cumulative numbers. :func:`record_run` holds the rules of storing one: the first
report of a run id creates its row (the token that sent it owns the id: another token's report of it is
refused, as is one that changes its namespace or framework), the next ones merge into it (each number the
larger of the stored and the reported, so a late report that arrives out of order cannot lower them, and
the Prometheus counters grow by the difference between a run's consecutive reports, and never shrink), and
the report's new misses are added while the run holds fewer than
:data:`~cache_protocol.runs.MAX_MISSES_PER_RUN`. The compile time a run's hits saved is the compile
time recorded with each entry it reported loading (``hit_keys``, looked up in the index as the report
arrives), added to what its earlier reports saved: the one definition, :mod:`cache_protocol.runs`.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cache_protocol.runs import MAX_MISSES_PER_RUN
from cache_server import metrics
from cache_server.background.slots import ServerSlots, SlotsBusy
from cache_server.domain import Clock, utcnow
from cache_server.domain.runs import (
    MissRecord,
    RunFilter,
    RunInfo,
    RunNumbers,
    RunRecorded,
    RunScopes,
    RunTotals,
)
from cache_server.errors import RunAmbiguous, RunConflict, RunNotFound, RunOwned, RunsBusy
from cache_server.index.database import Database
from cache_server.index.miss_facts import read_facts
from cache_server.index.runs import RunRepository
from cache_server.runs.budget import RunBudget
from cache_server.runs.plausible import countable, lifetime_seconds
from cache_server.runs.reasons import ExplainedMiss, explain
from cache_server.runs.variants import VariantsCache

__all__ = [
    "ANSWER_CHARACTERS",
    "MIN_PREFIX",
    "RUN_DETAIL_SLOTS",
    "RunDetail",
    "RunReport",
    "RunService",
    "record_run",
]

ANSWER_CHARACTERS = 768 * 1024
"""About how much text one page of a run's detail answers: the misses past it are left to the next page
(``offset`` + the misses listed), so a page stays under 1 MB whatever its misses hold."""
MIN_PREFIX = 4
"""The shortest run id prefix looked up (a shorter one must be a whole id)."""
CANDIDATES_SHOWN = 10
RUN_DETAIL_SLOTS = "run-details"
"""The server's slots for explaining run details (:class:`~cache_server.background.slots.ServerSlots`'
name): ``run_details_at_once`` pages are explained at once by all the server's processes together (each is
CPU: up to a second or so); one more waits up to ``run_detail_wait_seconds``, then is answered 503
``runs_busy`` with Retry-After."""
MAX_SAVED_MS = 2**62  # what the index's BIGINT column holds, with room to add
_PREFIX = re.compile(rf"[A-Za-z0-9._-]{{{MIN_PREFIX},64}}")


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
    numbers: Mapping[str, float]  # by name (cache_protocol.runs.REPORTED_NUMBERS), durations in seconds
    new_misses: Sequence[MissRecord]
    hit_keys: Sequence[str] = ()  # the entries loaded since the run's last report
    runtime: Mapping[str, Any] | None = None  # the components of JAX's key the run saw (issue 44)


@dataclass(frozen=True)
class RunDetail:
    """A run, its misses (up to the limit asked) each with its reason, and how many there are."""

    run: RunInfo
    misses: list[ExplainedMiss]
    misses_total: int
    misses_explained: int
    offset: int = 0  # the listed misses are the run's from this one (in the order reported)
    misses_stored: int = 0  # misses with a row (a run past MAX_MISSES_PER_RUN counts the rest only)
    reasons: dict[str, int] = field(
        default_factory=dict
    )  # reason -> misses, over the `counted` listed so far
    counted: int = 0  # misses whose reason a detail has worked out (and kept) so far


class RunService:
    """Stores run reports and explains them."""

    def __init__(
        self,
        database: Database,
        slots: ServerSlots,
        *,
        wait_seconds: float = 10.0,
        clock: Clock = utcnow,
        budget: RunBudget | None = None,
    ) -> None:
        self._repository = RunRepository(database)
        self._budget = budget or RunBudget()
        self._slots = slots  # the server's, for explaining details (RUN_DETAIL_SLOTS)
        self.detail_wait_seconds = wait_seconds
        self._database = database
        self._clock = clock
        self._variants = VariantsCache()

    def report(self, report: RunReport, *, reported_by: str | None, metrics_on: bool = True) -> RunInfo:
        """Store ``report`` for the token ``reported_by`` (None with auth off) and count it in the metrics
        (as far as it is plausible: :mod:`~cache_server.runs.plausible`; not at all unless ``metrics_on``);
        :class:`~cache_server.errors.RunOwned` / :class:`~cache_server.errors.RunConflict` store nothing."""
        saved = self._repository.compile_ms_of(report.namespace, report.hit_keys)
        numbers = RunNumbers.of_report(report.numbers, saved_ms=min(saved, MAX_SAVED_MS))
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
            runtime=dict(report.runtime) if report.runtime is not None else None,
        )
        recorded = record_run(self._repository, run, report.new_misses, now=now, budget=self._budget)
        if metrics_on:
            _count(report.framework, recorded, now=now)
        return recorded.run

    def list_runs(self, query: RunFilter) -> list[RunInfo]:
        """The runs ``query`` asks for, the latest started first."""
        return self._repository.list_runs(query)

    def totals(self, *, days: int, namespace: str | None = None) -> RunTotals:
        """What the runs started in the last ``days`` UTC days (today's included) reported, summed."""
        return self._repository.totals(since=self._since(days), namespace=namespace)

    def scopes(self, *, days: int, namespace: str | None, namespaces: Sequence[str]) -> RunScopes:
        """What the runs started in the last ``days`` UTC days reported: in all (or ``namespace``'s), for
        each of ``namespaces`` (a stats page's rows) and each day (three grouped queries)."""
        since = self._since(days)
        return RunScopes(
            total=self._repository.totals(since=since, namespace=namespace),
            by_namespace=self._repository.totals_by_namespace(since=since, namespaces=namespaces),
            daily=self._repository.daily(since=since, namespace=namespace),
        )

    def _since(self, days: int) -> dt.datetime:
        """The start of the first of the last ``days`` UTC days (today's included)."""
        today = self._clock().astimezone(dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        return today - dt.timedelta(days=max(days, 1) - 1)

    def detail(
        self, run_id: str, *, patterns: tuple[str, ...] | None, limit: int, offset: int = 0
    ) -> RunDetail:
        """A run with its misses ``offset`` to ``offset + limit`` explained (fewer where their text passes
        :data:`ANSWER_CHARACTERS`: the next page starts after the last listed), and the count of each reason
        over the misses any detail has explained so far (their reasons are kept with their rows: counting
        explains nothing again, and ``limit=0`` explains nothing). ``run_id`` may be a unique prefix of at
        least :data:`MIN_PREFIX` characters; :class:`RunAmbiguous` (listing them) if several runs start
        with it; :class:`RunNotFound` if there is no such run or it is in a namespace ``patterns`` (a
        scoped token's) do not cover; :class:`RunsBusy` if every slot of the server
        (:data:`RUN_DETAIL_SLOTS`) stays taken for ``detail_wait_seconds``."""
        run = self._resolve(run_id, patterns)
        if limit <= 0:
            return self._detail(run, [], offset=offset)
        try:
            with self._slots.hold(self.detail_wait_seconds):
                return self._detail(run, self._explained(run, limit=limit, offset=offset), offset=offset)
        except SlotsBusy:
            raise RunsBusy(
                f"{self._slots.count} run details are being explained by this server (all its processes); "
                "retry soon."
            ) from None

    def _explained(self, run: RunInfo, *, limit: int, offset: int) -> list[ExplainedMiss]:
        """A page of ``run``'s misses explained (cut where their text passes :data:`ANSWER_CHARACTERS`),
        their reasons kept with their rows."""
        page = self._repository.misses_of(run.run_id, offset=offset, limit=limit)
        if not page:
            return []
        keys = self._repository.miss_keys(run.run_id)  # the run's order (cheap: keys only)
        modules = sorted({m.module for m in page if m.module is not None})
        until = max((m.reported_at for m in page if m.reported_at is not None), default=None)
        facts = read_facts(self._database, run.namespace, [m.key for m in page], modules, until=until)
        explained = explain(page, keys, facts, self._variants)
        listed: list[ExplainedMiss] = []
        room = ANSWER_CHARACTERS
        for miss in explained:
            room -= _characters(miss)
            if listed and room < 0:
                break
            listed.append(miss)
        self._repository.keep_reasons(run.run_id, {miss.key: miss.reason for miss in listed})
        return listed

    def _detail(self, run: RunInfo, listed: list[ExplainedMiss], *, offset: int) -> RunDetail:
        reasons = self._repository.reason_counts(run.run_id)
        return RunDetail(
            run=run,
            misses=listed,
            misses_total=max(run.numbers.misses, run.misses_stored),
            misses_explained=sum(1 for m in listed if m.reason != "unknown"),
            offset=offset,
            misses_stored=run.misses_stored,
            reasons=reasons,
            counted=sum(reasons.values()),
        )

    def _resolve(self, run_id: str, patterns: tuple[str, ...] | None) -> RunInfo:
        """The run of this id, or of the one run whose id starts with it; only runs in a namespace
        ``patterns`` cover count (any with None), so a run the token may not see is as one never reported."""
        run = self._repository.get_run(run_id)
        if run is not None and (patterns is None or _covered(run.namespace, patterns)):
            return run
        if _PREFIX.fullmatch(run_id):
            found = [
                found_id
                for found_id, _ in self._repository.run_ids_starting(
                    run_id, patterns=patterns, limit=CANDIDATES_SHOWN + 1
                )
            ]
            if len(found) > 1:
                shown = ", ".join(found[:CANDIDATES_SHOWN]) + (
                    ", ..." if len(found) > CANDIDATES_SHOWN else ""
                )
                raise RunAmbiguous(f"Several runs start with {run_id!r}: {shown}. Give more of the id.")
            if found:
                again = self._repository.get_run(found[0])
                if again is not None:
                    return again
        raise RunNotFound(f"No run {run_id!r} was reported (or it is not one this token may see).")


def record_run(
    repository: RunRepository,
    run: RunInfo,
    misses: Sequence[MissRecord],
    *,
    now: dt.datetime,
    budget: RunBudget | None = None,
) -> RunRecorded:
    """Store one report of ``run`` (its numbers and identity; ``reported_by`` the token's id) and its new
    ``misses``, in one transaction. :class:`RunOwned` if another token reported this id first,
    :class:`RunConflict` if the run has another namespace or framework, :class:`QuotaExceeded` if a new
    run is past its token's ``budget`` (:mod:`~cache_server.runs.budget`); nothing is stored then. Misses
    past the run's bound or the budget's room are counted (in the numbers), not stored. ``run``'s
    ``saved_ms`` is what this report's hits saved: added to what the run's earlier reports saved."""
    budget = budget or RunBudget()
    stored = replace(run, updated_at=now)
    before: RunNumbers | None = None
    with repository.holding(run.run_id) as held:
        old = held.read()
        if old is None:
            budget.admit_run(held, run.reported_by)
        if old is None and not held.insert(stored):
            old = held.read()  # another report of the same run won the race: merge into it
        if old is not None:
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
                runtime=run.runtime if run.runtime is not None else old.runtime,
                numbers=_with_saved(
                    old.numbers.merged(run.numbers), old.numbers.saved_ms + run.numbers.saved_ms
                ),
            )
            held.update(stored)
        count = held.misses_held()
        wanted = min(len(misses), max(0, MAX_MISSES_PER_RUN - count))
        room = budget.misses_room(held, run.namespace, run.reported_by, wanted)
        kept = held.add_misses(run.namespace, misses[:room], now=now)
    return RunRecorded(
        run=replace(stored, misses_stored=count + kept), before=before, misses_kept=kept, previous=old
    )


def _with_saved(numbers: RunNumbers, saved_ms: int) -> RunNumbers:
    """``numbers`` with ``saved_ms`` (within the column's bound): saved time adds up, report by report."""
    return RunNumbers(**{**numbers.as_dict(), "saved_ms": min(saved_ms, MAX_SAVED_MS)})


def _covered(namespace: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(namespace, p) for p in patterns)


def _count(framework: str, recorded: RunRecorded, *, now: dt.datetime) -> None:
    """Grow the run counters by what this report added to the run's countable numbers (each bounded by
    what the run could have done in its lifetime: :func:`~cache_server.runs.plausible.countable`)."""
    previous = recorded.previous
    old = RunNumbers()
    if previous is not None:
        old = countable(previous.numbers, lifetime_seconds(previous, at=previous.updated_at))
    after = countable(recorded.run.numbers, lifetime_seconds(recorded.run, at=now))
    if previous is None:
        metrics.RUNS.labels(framework).inc()
    if (hits := after.hits - old.hits) > 0:
        metrics.RUN_HITS.labels(framework).inc(hits)
    if (misses := after.misses - old.misses) > 0:
        metrics.RUN_MISSES.labels(framework).inc(misses)
    if (compile_ms := after.compile_ms - old.compile_ms) > 0:
        metrics.RUN_COMPILE_SECONDS.labels(framework).inc(compile_ms / 1000.0)
    if (saved_ms := after.saved_ms - old.saved_ms) > 0:
        metrics.RUN_SAVED_SECONDS.labels(framework).inc(saved_ms / 1000.0)


def _characters(miss: ExplainedMiss) -> int:
    """About how much text ``miss`` adds to an answer (its strings, and a little for each field)."""
    texts = [miss.key, miss.module, miss.detail, miss.shapes, miss.nearest_key, miss.policy]
    size = 400 + sum(len(text) for text in texts if text)
    size += sum(len(name) + len(value) + 8 for name, value in (miss.components or {}).items())
    size += sum(
        40 + len(d.component) + len(d.ours or "") + len(d.theirs or "") for d in miss.differing_components
    )
    size += sum(
        120 + len(c.op.name) + len(c.op.opcode) + len(c.op.op or "") + len(c.op.source or "")
        for c in miss.baked
    )
    size += 80 * len(miss.dimensions)
    return size
