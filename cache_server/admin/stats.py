"""The numbers people running the cache look at: what it holds, what it served, what that saved.

Everything comes from persistent counters in the index (a restart loses nothing except the last
``XLA_CACHE_ACCESS_FLUSH_SECONDS`` of hits not yet written) and the daily rollup.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cache_server.domain import Counters, NamespaceInfo
from cache_server.index.admin import AdminRepository, GraphGroup

__all__ = ["DayCounters", "StatsReport", "Totals", "build_report"]


@dataclass
class Totals:
    """What is stored now and the counters, for all namespaces together."""

    entries: int
    bytes: int
    counters: Counters


@dataclass
class DayCounters:
    """One UTC day of the rollup (days without any count are present, with zeros)."""

    day: dt.date
    counters: Counters


@dataclass
class StatsReport:
    """Totals, per namespace, per day, and the graphs with the most shape variants."""

    generated_at: dt.datetime
    totals: Totals
    namespaces: list[NamespaceInfo]
    daily: list[DayCounters]
    top_graphs: list[GraphGroup]


def build_report(
    repository: AdminRepository,
    *,
    now: dt.datetime,
    days: int = 30,
    top: int = 10,
    namespace: str | None = None,
) -> StatsReport:
    """The report over every namespace (or one) made at ``now``, with ``days`` days of rollup (today's
    included) and ``top`` graphs. The day is read once: a report made across midnight has exactly ``days``."""
    rows = [row for row in repository.namespace_rows() if namespace in (None, row.name)]
    totals = Totals(
        entries=sum(r.entries for r in rows), bytes=sum(r.bytes for r in rows), counters=Counters()
    )
    for row in rows:
        totals.counters.add(row.counters)
    today = now.date()
    since = today - dt.timedelta(days=max(days, 1) - 1)
    counted = repository.daily(since, namespace)
    daily = [
        DayCounters(day, counted.get(day, Counters()))
        for day in (since + dt.timedelta(days=n) for n in range((today - since).days + 1))
    ]
    return StatsReport(
        generated_at=now,
        totals=totals,
        namespaces=rows,
        daily=daily,
        top_graphs=repository.top_graphs(top, namespace) if top > 0 else [],
    )
