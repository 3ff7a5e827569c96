"""The case registry, repetition and timing, targets, and the printed and JSON report.

A case is a function ``run(ctx, result)`` registered with :func:`case`. It sets up what it needs (not
timed), then calls :meth:`Context.repeat` for each series it measures: ``setup`` runs before every
repetition outside the clock, ``run`` inside it. A series reports the median, min and max seconds and, for
each amount of work it declares (entries, MB, requests), a rate per second of the median. Targets are
judged with :meth:`CaseResult.target`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.clientops import push
from bench.data import FIXTURE_DIR, REAL_DIR, CacheDir, load_bases, make_cache_dir, synthesize
from bench.launch import LiveServer, run_server

__all__ = [
    "CASES",
    "Case",
    "CaseResult",
    "Context",
    "Series",
    "Target",
    "case",
]

T = TypeVar("T")
MB = 1_000_000

MET, NOT_MET, NOT_MEASURED = "met", "not met", "not measured"


@dataclass
class Series:
    """One measured operation: the seconds of each repetition and the work each one did."""

    label: str
    seconds: list[float] = field(default_factory=list)
    work: dict[str, float] = field(default_factory=dict)  # unit -> amount per repetition
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")

    def rates(self) -> dict[str, float]:
        """``{"<unit>/s": amount / median}`` for each unit of work."""
        median = self.median
        if not self.seconds or median <= 0:
            return {}
        return {f"{unit}/s": amount / median for unit, amount in self.work.items()}

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "seconds": [round(s, 6) for s in self.seconds],
            "median_s": round(self.median, 6),
            "min_s": round(min(self.seconds), 6) if self.seconds else None,
            "max_s": round(max(self.seconds), 6) if self.seconds else None,
            "work": self.work,
            "rates": {unit: round(rate, 3) for unit, rate in self.rates().items()},
            "note": self.note,
        }


@dataclass
class Target:
    """One target of the issue, as this run judged it."""

    text: str
    measured: str
    verdict: str  # met, not met, not measured
    why: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"target": self.text, "measured": self.measured, "verdict": self.verdict, "why": self.why}


@dataclass
class CaseResult:
    """What one case measured."""

    name: str
    summary: str = ""
    series: dict[str, Series] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    def add(self, series: Series) -> Series:
        self.series[series.label] = series
        return series

    def target(
        self,
        text: str,
        value: float | None,
        limit: float,
        *,
        at_most: bool,
        fmt: str = "{:.2f}",
        why: str = "",
        not_measured: str = "",
    ) -> Target:
        """Judge ``value`` against ``limit`` (``at_most``: value <= limit, else value >= limit).

        ``not_measured`` (or a None value) records the target as not measured, with that reason.
        """
        if not_measured or value is None or value != value:  # NaN: nothing measured
            judged = Target(
                text, "" if value is None else fmt.format(value), NOT_MEASURED, not_measured or why
            )
        else:
            met = value <= limit if at_most else value >= limit
            judged = Target(text, fmt.format(value), MET if met else NOT_MET, why)
        self.targets.append(judged)
        return judged

    def as_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "series": {label: s.as_dict() for label, s in self.series.items()},
            "figures": self.figures,
            "targets": [t.as_dict() for t in self.targets],
            "notes": self.notes,
            "error": self.error,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class Case:
    """A registered case."""

    name: str
    run: Callable[[Context, CaseResult], None]
    summary: str
    needs: tuple[str, ...] = ()  # cases whose results this one's ratios use (run first, even if not asked)
    full_only: bool = False  # skipped by --quick
    prepare: Callable[[Context], None] | None = None  # called before any case runs: start servers early


CASES: dict[str, Case] = {}


def case(
    name: str,
    summary: str,
    *,
    needs: tuple[str, ...] = (),
    full_only: bool = False,
    prepare: Callable[[Context], None] | None = None,
) -> Callable[[Callable[[Context, CaseResult], None]], Callable[[Context, CaseResult], None]]:
    """Register ``run`` as the case ``name``."""

    def register(run: Callable[[Context, CaseResult], None]) -> Callable[[Context, CaseResult], None]:
        CASES[name] = Case(name, run, summary, needs, full_only, prepare)
        return run

    return register


class Context:
    """What every case shares: sizes, repetitions, a scratch directory, the data set, earlier results."""

    def __init__(self, *, quick: bool, reps: int, scratch: Path, options: Mapping[str, Any]) -> None:
        self.quick = quick
        self.reps = reps
        self.scratch = scratch
        self.options = dict(options)
        self.results: dict[str, CaseResult] = {}
        self._dataset: CacheDir | None = None
        self._bases: tuple[list[bytes], str] | None = None
        self._dirs = 0
        self._pushed: set[str] = set()
        self._started: dict[str, Future[Any]] = {}
        self._starter = ThreadPoolExecutor(max_workers=3, thread_name_prefix="bench-start")
        self._stack = contextlib.ExitStack()

    def start(self, key: str, factory: Callable[[], contextlib.AbstractContextManager[Any]]) -> None:
        """Enter ``factory()`` (a server, say) in the background, once per ``key``; it is left when the run
        ends. Cases start what they need before the run begins, so servers start while others measure."""
        if key not in self._started:
            self._started[key] = self._starter.submit(self._stack.enter_context, factory())

    def started(self, key: str, factory: Callable[[], contextlib.AbstractContextManager[T]]) -> T:
        """What :meth:`start` entered for ``key`` (started now if it was not), once it is ready."""
        self.start(key, factory)
        value: T = self._started[key].result()
        return value

    def wait_started(self) -> None:
        """Wait until everything started in the background is ready (or failed)."""
        for future in list(self._started.values()):
            future.exception()

    def close(self) -> None:
        """Wait for what is still starting, then stop everything started."""
        self._starter.shutdown(wait=True)
        self._stack.close()

    def start_server(self) -> None:
        """Start the shared server in the background (see :meth:`server`)."""
        self.start("server", lambda: run_server(self.tmpdir("server")))

    def server(self) -> LiveServer:
        """The shared ``xla-cache-server serve`` (one worker, SQLite, local blobs) of the cases that need
        no server of their own; stopped when the run ends."""
        return self.started("server", lambda: run_server(self.tmpdir("server")))

    def ensure_pushed(self, cache: CacheDir) -> None:
        """Push ``cache`` to the shared server once (setup: not timed)."""
        if cache.namespace in self._pushed:
            return
        outcome = push(self.server().url, cache, timeout=600)
        if outcome.uploaded + outcome.already_present != len(cache.keys):
            raise RuntimeError(
                f"setup push stored {outcome.uploaded} of {len(cache.keys)}: {outcome.errors[:3]}"
            )
        self._pushed.add(cache.namespace)

    def pick(self, quick: T, full: T) -> T:
        """The quick run's size or the full run's."""
        return quick if self.quick else full

    def tmpdir(self, name: str) -> Path:
        """A new, empty directory under the scratch directory."""
        self._dirs += 1
        path = self.scratch / f"{self._dirs:03d}-{name}"
        path.mkdir(parents=True)
        return path

    def bases(self) -> tuple[list[bytes], str]:
        """Real entries to build data from, and where they came from."""
        if self._bases is None:
            real = load_bases(REAL_DIR)
            if len(real) >= 50:
                self._bases = (real, f"{len(real)} real torch_xla 2.7 CPU entries from {REAL_DIR}")
            else:
                self._bases = (load_bases(FIXTURE_DIR), f"the {len(load_bases(FIXTURE_DIR))} fixture entries")
        return self._bases

    def dataset(self) -> CacheDir:
        """The shared cache directory of the push, warm and tar-floor cases: 2,000 entries of 5-60 kB
        (quick: 300), built from :meth:`bases` (see :mod:`bench.data`)."""
        if self._dataset is None:
            bases, _ = self.bases()
            count = self.pick(300, 2000)
            entries = synthesize(bases, count, 5_000, 60_000)
            self._dataset = make_cache_dir(self.tmpdir("dataset"), entries)
        return self._dataset

    def dataset_note(self) -> str:
        data = self.dataset()
        _, source = self.bases()
        return f"{len(data.keys)} entries, {data.total_bytes / MB:.1f} MB, made of mutated {source}"

    def repeat(
        self,
        label: str,
        run: Callable[[], object],
        *,
        setup: Callable[[], object] | None = None,
        work: Mapping[str, float] | None = None,
        reps: int | None = None,
    ) -> Series:
        """Run ``setup`` (not timed) then ``run`` (timed), ``reps`` times (default: the context's).

        The page cache's dirty data is written out before each timed run (``sync``, not timed): on this
        machine creating a file costs 20-40 us with little dirty data and 600 us once writeback has begun,
        so without it a run would pay for what the one before it left unwritten.
        """
        series = Series(label, work=dict(work or {}))
        for _ in range(reps or self.reps):
            if setup is not None:
                setup()
            os.sync()
            started = time.perf_counter()
            run()
            series.seconds.append(time.perf_counter() - started)
        return series


def fresh(path: Path) -> None:
    """Make ``path`` an empty directory."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def seconds_text(value: float) -> str:
    if value != value:
        return "-"
    if value < 0.01:
        return f"{value * 1000:.2f} ms"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s"


def rate_text(unit: str, value: float) -> str:
    return f"{value:,.0f} {unit}" if value >= 100 else f"{value:,.1f} {unit}"
