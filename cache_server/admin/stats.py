"""The numbers people running the cache look at: what it holds, what it served, what that saved.

Everything comes from persistent counters in the index (a restart loses nothing except the last
``XLA_CACHE_ACCESS_FLUSH_SECONDS`` of hits not yet written) and the daily rollup.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cache_server.domain import Counters, NamespaceInfo
from cache_server.errors import BadRequest
from cache_server.index.admin import AdminRepository
from cache_server.index.graph_records import GraphGroup, GraphRepository

__all__ = [
    "DayCounters",
    "StatsQuery",
    "StatsReport",
    "Totals",
    "build_report",
    "page_cursor",
    "parse_cursor",
]


@dataclass(frozen=True)
class StatsQuery:
    """What a report covers: ``days`` days of rollup (today's included), the ``top`` graphs, every namespace
    or only ``namespace``, and a page of at most ``limit`` namespaces (None: all) after the cursor ``after``
    (the ``next_after`` of the page before)."""

    days: int = 30
    top: int = 10
    namespace: str | None = None
    limit: int | None = None
    after: str | None = None


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
    """Totals, per namespace, per day, and the graphs that cost most to compile."""

    generated_at: dt.datetime
    totals: Totals
    namespaces: list[NamespaceInfo]
    daily: list[DayCounters]
    top_graphs: list[GraphGroup]
    namespace_count: int = 0  # every namespace's, not only the page's
    next_after: str | None = None  # the cursor of the next page of namespaces; None on the last


_MAX_BYTES = 2**63 - 1  # what the index's BIGINT columns hold


def page_cursor(ns: NamespaceInfo) -> str:
    """The cursor after this namespace: its stored bytes and its name (the order of the pages)."""
    return f"{ns.bytes}:{ns.name}"


def parse_cursor(text: str) -> tuple[int, str]:
    """(bytes, name) from :func:`page_cursor`'s text; :class:`BadRequest` for anything else."""
    size, sep, name = text.partition(":")
    if (
        not sep
        or not size.isascii()
        or not size.isdigit()
        or not name
        or len(size.lstrip("0")) > 19  # int() of thousands of digits is refused, and costly
        or int(size) > _MAX_BYTES
    ):
        raise BadRequest(f"after={text!r} is not a cursor this server gave (next_after of the page before).")
    return int(size), name


def build_report(
    repository: AdminRepository, graphs: GraphRepository, query: StatsQuery, *, now: dt.datetime
) -> StatsReport:
    """The report ``query`` asks for, made at ``now``. The day is read once: a report made across midnight
    has exactly ``query.days``.

    Namespaces come a page at a time, largest first then by name. Totals are over every namespace (or the
    one asked for). A namespace whose stored bytes change between two pages' requests may be missed or
    shown twice (it moved in the order); the totals and ``namespace_count`` say what is there."""
    days, top, namespace, limit = query.days, query.top, query.namespace, query.limit
    cursor = parse_cursor(query.after) if query.after is not None else None
    count, entries, size, counters = repository.namespace_totals(namespace)
    page_size = limit if limit is not None else max(count, 1)
    rows = repository.namespace_page(after=cursor, limit=page_size + 1, namespace=namespace)
    more = len(rows) > page_size
    rows = rows[:page_size]
    totals = Totals(entries=entries, bytes=size, counters=counters)
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
        top_graphs=graphs.top_graphs(top, namespace) if top > 0 else [],
        namespace_count=count,
        next_after=page_cursor(rows[-1]) if more and rows else None,
    )
