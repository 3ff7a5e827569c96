"""The numbers people running the cache look at: what it holds, what it served, what that saved.

Everything comes from persistent counters in the index (a restart loses nothing except the last
``XLA_CACHE_ACCESS_FLUSH_SECONDS`` of hits not yet written) and the daily rollup.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cache_server.index.admin_repository import AdminRepository, DailyRow, GraphGroup, NamespaceRow
from cache_server.index.daily import today
from cache_server.index.models import utcnow

__all__ = ["Counters", "DayCounters", "NamespaceStats", "StatsReport", "build_report"]


def hit_rate(hits: int, misses: int) -> float | None:
    """Hits over lookups; None before the first lookup."""
    lookups = hits + misses
    return hits / lookups if lookups else None


@dataclass
class Counters:
    """What is stored and what was served, for one namespace or all of them."""

    entries: int = 0
    bytes: int = 0
    hits: int = 0
    misses: int = 0
    uploads: int = 0
    evictions: int = 0
    bytes_served: int = 0
    compile_ms_saved: int = 0

    @property
    def hit_rate(self) -> float | None:
        return hit_rate(self.hits, self.misses)

    def add(self, row: NamespaceRow) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(row, name))


@dataclass
class NamespaceStats:
    """One namespace's counters, with its labels and when it was last used."""

    name: str
    labels: dict[str, str]
    last_used_at: dt.datetime
    counters: Counters


@dataclass
class DayCounters:
    """One UTC day of the rollup (days without any count are present, with zeros)."""

    day: dt.date
    row: DailyRow

    @property
    def hit_rate(self) -> float | None:
        return hit_rate(self.row.hits, self.row.misses)


@dataclass
class StatsReport:
    """Totals, per namespace, per day, and the graphs with the most shape variants."""

    generated_at: dt.datetime
    totals: Counters
    namespaces: list[NamespaceStats]
    daily: list[DayCounters]
    top_graphs: list[GraphGroup]


def _days(since: dt.date, last: dt.date, rows: list[DailyRow]) -> list[DayCounters]:
    by_day = {row.day: row for row in rows}
    days = []
    day = since
    while day <= last:
        empty = DailyRow(day, 0, 0, 0, 0, 0, 0, 0)
        days.append(DayCounters(day, by_day.get(day, empty)))
        day += dt.timedelta(days=1)
    return days


def build_report(
    repository: AdminRepository, *, days: int = 30, top: int = 10, namespace: str | None = None
) -> StatsReport:
    """The report over every namespace (or one), with ``days`` days of rollup and ``top`` graphs."""
    rows = [row for row in repository.namespace_rows() if namespace in (None, row.name)]
    totals = Counters()
    per_namespace = []
    for row in rows:
        counters = Counters()
        counters.add(row)
        totals.add(row)
        per_namespace.append(NamespaceStats(row.name, row.labels, row.last_used_at, counters))
    last = today()  # read once, so a report made across midnight still has exactly ``days`` days
    since = last - dt.timedelta(days=max(days, 1) - 1)
    return StatsReport(
        generated_at=utcnow(),
        totals=totals,
        namespaces=per_namespace,
        daily=_days(since, last, repository.daily(since, namespace)),
        top_graphs=repository.top_graphs(top, namespace) if top > 0 else [],
    )
