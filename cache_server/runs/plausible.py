"""What one run may add to the fleet-wide ``xla_cache_run_*`` counters: no more than is plausible for it.

A report is one process's cumulative numbers. The runs table keeps what it reported (up to the protocol's
bounds); the counters count each number only up to what the run could have done in its lifetime so far:

* its lifetime is from its ``started_at`` to its end (``ended_at`` where reported, and never later than
  the server's clock at the report), plus :data:`GRACE_SECONDS` for clocks that disagree, and at most
  :data:`MAX_LIFETIME_SECONDS`;
* ``hits`` and ``misses`` each at most lifetime x :data:`MAX_LOOKUPS_PER_SECOND` (a persistent-cache
  lookup deserializes or compiles an executable: a process makes far fewer than this many a second);
* ``compile_seconds`` at most lifetime x :data:`MAX_COMPILE_THREADS` (compiles running at once);
* ``saved_seconds`` is what the run's loaded entries cost to compile, so it is counted in proportion to
  the hits counted.

The bound is worked out again at each report from the run's stored numbers, so the counters grow by the
difference between what was countable after the last report and after this one: an honest run whose early
report was over the bound (a skewed clock) is counted in full once its lifetime covers it, and the
counters never shrink. A report over the bound is still stored (it is refused only past the protocol's
bounds); only the counters are clamped. A token marked ``metrics off`` (``xla-cache-server tokens metrics
NAME off``) adds nothing to the counters; its runs are stored as any other's.
"""

from __future__ import annotations

import datetime as dt

from cache_server.domain.runs import RunInfo, RunNumbers

__all__ = [
    "GRACE_SECONDS",
    "MAX_COMPILE_THREADS",
    "MAX_LIFETIME_SECONDS",
    "MAX_LOOKUPS_PER_SECOND",
    "countable",
    "lifetime_seconds",
]

MAX_LOOKUPS_PER_SECOND = 1_000
"""Persistent-cache lookups (hits, and misses) one process may count per second of its lifetime."""
MAX_COMPILE_THREADS = 256
"""Compile seconds one process may count per second of its lifetime (compiles in parallel threads)."""
GRACE_SECONDS = 300.0
"""Added to every lifetime: a client's clock ahead of the server's does not hold back a short run."""
MAX_LIFETIME_SECONDS = 366 * 86_400.0
"""The longest lifetime counted (a ``started_at`` in 1970 counts as a year)."""


def lifetime_seconds(run: RunInfo, *, at: dt.datetime) -> float:
    """How long ``run`` may have been running when reported at ``at`` (the server's clock), grace included."""
    end = at if run.ended_at is None else min(at, run.ended_at)
    lived = (end - run.started_at).total_seconds()
    return min(max(lived, 0.0) + GRACE_SECONDS, MAX_LIFETIME_SECONDS)


def countable(numbers: RunNumbers, lifetime: float) -> RunNumbers:
    """The part of ``numbers`` the counters may count for a run that lived ``lifetime`` seconds."""
    lookups = int(lifetime * MAX_LOOKUPS_PER_SECOND)
    hits = min(numbers.hits, lookups)
    saved = numbers.saved_ms if hits == numbers.hits else numbers.saved_ms * hits // max(numbers.hits, 1)
    return RunNumbers(
        hits=hits,
        misses=min(numbers.misses, lookups),
        compile_ms=min(numbers.compile_ms, int(lifetime * MAX_COMPILE_THREADS * 1000)),
        saved_ms=saved,
    )
