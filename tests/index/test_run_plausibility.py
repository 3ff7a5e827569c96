"""The counters count what is plausible for a run (cache_server.runs.plausible): bounded by its life,
never shrinking; a run whose early report was over the bound is counted in full once its life covers it."""

from __future__ import annotations

import datetime as dt

from cache_server.domain.runs import RunInfo, RunNumbers
from cache_server.runs.plausible import (
    GRACE_SECONDS,
    MAX_LIFETIME_SECONDS,
    MAX_LOOKUPS_PER_SECOND,
    countable,
    lifetime_seconds,
)

START = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)


def _run(*, started: dt.datetime = START, ended: dt.datetime | None = None) -> RunInfo:
    return RunInfo("run-00000001", "ns", "jax", "h", 0, None, started, started, ended, RunNumbers())


def test_the_lifetime_runs_to_the_end_or_the_report_with_grace_and_a_cap() -> None:
    at = START + dt.timedelta(seconds=100)
    assert lifetime_seconds(_run(), at=at) == 100 + GRACE_SECONDS
    assert lifetime_seconds(_run(ended=START + dt.timedelta(seconds=10)), at=at) == 10 + GRACE_SECONDS
    assert lifetime_seconds(_run(ended=at + dt.timedelta(days=9)), at=at) == 100 + GRACE_SECONDS
    assert lifetime_seconds(_run(started=at + dt.timedelta(days=1)), at=at) == GRACE_SECONDS
    ancient = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    assert lifetime_seconds(_run(started=ancient), at=at) == MAX_LIFETIME_SECONDS


def test_countable_numbers_are_bounded_and_grow_with_the_lifetime() -> None:
    reported = RunNumbers(hits=10**9, misses=5, compile_ms=10**12, saved_ms=10**9, warm_bytes=7)
    early = countable(reported, 400.0)
    assert early.hits == 400 * MAX_LOOKUPS_PER_SECOND and early.misses == 5
    assert early.saved_ms == 10**9 * early.hits // 10**9
    assert early.warm_bytes == 0  # not a counter
    later = countable(reported, 10**6)
    assert later.hits == 10**9 and later.saved_ms == 10**9
    assert all(later.as_dict()[name] >= value for name, value in early.as_dict().items())
