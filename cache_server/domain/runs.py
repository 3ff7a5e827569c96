"""The run vocabulary: a run as the server keeps it (:class:`RunInfo`), its numbers (:class:`RunNumbers`,
made from :data:`cache_protocol.runs.RUN_NUMBERS`), its misses (:class:`MissRecord`), what storing a report
did (:class:`RunRecorded`), a listing's filter and a period's totals. The index stores these, the service
(:mod:`cache_server.runs.ingest`) decides what to store, the routes show them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from cache_protocol.runs import RUN_NUMBERS, milliseconds

__all__ = [
    "NUMBER_FIELDS",
    "MissRecord",
    "RunFilter",
    "RunInfo",
    "RunNumbers",
    "RunRecorded",
    "RunScopes",
    "RunTotals",
]

NUMBER_FIELDS = tuple(number.stored for number in RUN_NUMBERS)
"""The stored numbers' names (the ``runs`` table's columns), in the declaration's order."""
_INDEX = {name: index for index, name in enumerate(NUMBER_FIELDS)}


class RunNumbers:
    """A run's cumulative numbers by their stored names (durations in whole milliseconds: ``warm_ms``),
    each 0 unless given; read as attributes (``numbers.hits``). Immutable, compared by value."""

    __slots__ = ("_values",)
    _values: tuple[int, ...]

    def __init__(self, **values: int) -> None:
        unknown = sorted(set(values) - set(_INDEX))
        if unknown:
            raise TypeError(f"RunNumbers has no number {unknown[0]!r}")
        object.__setattr__(self, "_values", tuple(int(values.get(name, 0)) for name in NUMBER_FIELDS))

    @classmethod
    def of_row(cls, values: Iterable[Any]) -> RunNumbers:
        """The numbers of a row's values, in :data:`NUMBER_FIELDS`' order."""
        return cls(**dict(zip(NUMBER_FIELDS, (int(value) for value in values), strict=True)))

    @classmethod
    def of_report(cls, reported: Mapping[str, float], **worked_out: int) -> RunNumbers:
        """The numbers of a report's (by their report names; seconds as numbers, stored as milliseconds by
        the one rule, :func:`~cache_protocol.runs.milliseconds`) and those the server works out."""
        values = {
            number.stored: milliseconds(reported[number.name])
            if number.unit == "seconds"
            else int(reported[number.name])
            for number in RUN_NUMBERS
            if number.name in reported
        }
        return cls(**{**values, **worked_out})

    def __getattr__(self, name: str) -> int:
        if name not in _INDEX:
            raise AttributeError(name)
        return self._values[_INDEX[name]]

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("RunNumbers are immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunNumbers) and self._values == other._values

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"RunNumbers({', '.join(f'{k}={v}' for k, v in self.as_dict().items())})"

    def as_dict(self) -> dict[str, int]:
        """The numbers by their stored names (the columns' values)."""
        return dict(zip(NUMBER_FIELDS, self._values, strict=True))

    def shown(self) -> dict[str, int | float]:
        """The numbers by their report names, durations in seconds (as the API shows them)."""
        return {
            number.name: value / 1000 if number.unit == "seconds" else value
            for number, value in zip(RUN_NUMBERS, self._values, strict=True)
        }

    def merged(self, other: RunNumbers) -> RunNumbers:
        """Each number the larger of the two (reports are cumulative: a smaller one is an older one)."""
        return RunNumbers.of_row(max(a, b) for a, b in zip(self._values, other._values, strict=True))


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
    # the components of JAX's key the run saw (platform version, topology, devices, flags, compression...):
    # what a prefill compares its target with (issue 44; migration 0020). None: not reported.
    runtime: dict[str, Any] | None = None


@dataclass(frozen=True)
class MissRecord:
    """One compile a run reported, as stored (``reported_at`` orders a run's misses)."""

    key: str
    module: str | None
    components: dict[str, str] | None
    compile_ms: int | None
    load_failed: bool
    reported_at: dt.datetime | None = None
    source: str | None = None  # where the job compiled it (file:line), when its client knew


@dataclass(frozen=True)
class RunRecorded:
    """What storing one report did: the numbers before it (None: the run's first report) and after it,
    and how many of its misses were kept (the rest were over the run's bound, or reported before)."""

    run: RunInfo
    before: RunNumbers | None
    misses_kept: int
    previous: RunInfo | None = None  # the run as stored before this report (None: its first)


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


@dataclass(frozen=True)
class RunTotals:
    """The runs of a period together: how many, and what they reported (their hits are entries loaded
    from the cache, their misses compiles)."""

    runs: int
    hits: int
    misses: int
    compile_ms: int
    saved_ms: int


NO_RUNS = RunTotals(0, 0, 0, 0, 0)


@dataclass(frozen=True)
class RunScopes:
    """What the jobs reported over one period, in each scope a stats page shows: all the runs asked for
    (``total``: every namespace's, or the one asked for), each namespace of the page's, each UTC day's."""

    total: RunTotals
    by_namespace: Mapping[str, RunTotals]
    daily: Mapping[dt.date, RunTotals]
