"""The run report: what a job tells the server about its run (issue 27). Both packages import it.

A client that warmed sends ``POST /v1/runs`` at exit and every :data:`REPORT_INTERVAL_SECONDS` while it
runs, so that a killed job leaves most of its story. Each report carries the run's cumulative numbers (it
replaces the last report's numbers; it never adds to them) and the compiles (misses) not yet reported, at
most :data:`MAX_MISSES_PER_REPORT` of them; the server keeps at most :data:`MAX_MISSES_PER_RUN` per run and
counts the rest. The body (JSON)::

    {
      "run_id": "3f2c…",              # made by the client once per run (RUN_ID_PATTERN); the first token
                                      # that reports an id owns it
      "namespace": "cpu-tx2.7-…",     # the namespace the run warmed from; a scoped token must cover it
      "framework": "torch_xla",       # one of FRAMEWORKS
      "host": "tpu-vm-3",             # at most HOST_MAX_LENGTH characters
      "process_index": 0,             # 0 .. MAX_PROCESS_INDEX: which process of its job the run is: the
                                      # framework's index where its distributed runtime is up, else the
                                      # launcher's rank (RANK, SLURM_PROCID, LOCAL_RANK, xmp.spawn's, a
                                      # multiprocessing child's number), else 0 (xla_cache.runs.ranks)
      "started_at": 1764700000.0,     # unix seconds: when warm() was called
      "ended_at": null,               # unix seconds at the final report (the exit), else null
      "warm_seconds": 1.8, "warm_bytes": 1048576, "warm_entries": 2000,
      "hits": 1990,                   # persistent-cache loads (torch_xla PersistentCacheHit; JAX cache_hits)
      "misses": 10,                   # compiles (torch_xla UncachedCompile; JAX cache_misses)
      "compile_seconds": 31.5,        # compile time paid (torch_xla CompileTime; JAX compile durations)
      "uploaded_entries": 10, "live_entries": 0, "load_failures": 0,
      "unverified_entries": 0,        # entries skipped because no trusted key signed them (issue 28:
                                      # XLA_CACHE_TRUSTED_KEYS), by the warm and the follower
      "hit_keys": ["…"],              # the entries the run loaded, not in an earlier report of this run
                                      # (at most MAX_HITS_PER_REPORT): the server prices each hit at the
                                      # compile time recorded with its entry (saved_seconds)
      "new_misses": [                 # the compiles not in an earlier report of this run
        {"key": "…",                  # the cache key (file name) the compile wrote
         "module": "jit_step",        # the graph's name where the client knows it, else null
         "components": {"computation": "ab12…", "compile_options": "…"},  # JAX's cache-key component
                                      # hashes (COMPONENT_NAMES), else null
         "compile_seconds": 2.1,      # this compile's time where known, else null
         "source": "train.py:57",     # where the job compiled it (torch_xla: the call site of the
                                      # mark_step()/sync() that compiled it, SOURCE_MAX_LENGTH), else null
         "load_failed": false}        # an entry of this key was there but failed to load
      ],
      "runtime": {                    # optional, sent until a report with it is taken (JAX jobs): the
        "platform_version": "…",      # components of JAX's key this runtime sets, what a prefill compares
        "topology": {…}, "devices": [[0, [0, 0, 0]], …],   # its target with (issue 44; the fields are
        "xla_flags_digest": "…", "compression": "zstandard", # xla_cache.frameworks.key_components.COMPARED)
        "xla_caches": "none", …}
    }

Every count is an integer in ``0 .. MAX_COUNT``, every duration a number in ``0 .. MAX_SECONDS``; anything
else, an unknown field, or a run id another token owns is refused with 4xx and nothing is stored.

**Saved**, defined once: a hit saves what its entry cost to compile, the compile time recorded with the
entry by the run that compiled and uploaded it (torch_xla's ``CompileTime`` of that compile; a JAX entry
carries its own). A run's ``saved_seconds`` is that time summed over the entries it reported in ``hit_keys``
(an entry with no recorded time, or gone from the index, adds 0); a namespace's and the server's are the
sums of their runs'. The server's own lookups (a manifest or GET that found its key) never count as saved
nor in a hit rate: a download may go unused. A hit the client could not tie to its entry (a file system
that keeps no access times) is counted in ``hits`` but saves nothing.

The numbers (``warm_seconds`` to ``unverified_entries``, and the server's ``saved_seconds``) are declared
once, in :data:`RUN_NUMBERS`: the client's report body, the server's schemas, its stored numbers (durations
in whole milliseconds, by :func:`milliseconds`) and the ``runs`` table's columns are all made from it. A
new number is a line there, the client code that measures it and a migration adding its column.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, get_args

__all__ = [
    "COMPONENT_NAMES",
    "FRAMEWORKS",
    "HOST_MAX_LENGTH",
    "MAX_COUNT",
    "MAX_HITS_PER_REPORT",
    "MAX_MISSES_PER_REPORT",
    "MAX_MISSES_PER_RUN",
    "MAX_PROCESS_INDEX",
    "MAX_SECONDS",
    "MISS_ADVICE",
    "MISS_REASONS",
    "MODULE_MAX_LENGTH",
    "REPORTED_NUMBERS",
    "REPORT_INTERVAL_SECONDS",
    "RUN_ID_PATTERN",
    "RUN_NUMBERS",
    "SOURCE_MAX_LENGTH",
    "Framework",
    "MissReason",
    "RunNumber",
    "milliseconds",
    "report_numbers",
    "seconds_clamped",
]

RUN_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{7,63}")
"""A run id: 8 to 64 of letters, digits, '.', '_' or '-' (the client uses a random UUID's 32 hex digits)."""
Framework = Literal["torch_xla", "jax", "torchax"]
"""The frameworks a run report names."""
FRAMEWORKS: Final[tuple[Framework, ...]] = get_args(Framework)
HOST_MAX_LENGTH: Final = 256
MODULE_MAX_LENGTH: Final = 256
SOURCE_MAX_LENGTH: Final = 200  # a miss's ``source``: ``file:line``, the file as its last two path parts
MAX_PROCESS_INDEX: Final = 2**31 - 1
MAX_COUNT: Final = 2**53
"""The largest count a report may carry (larger is refused, not clipped)."""
MAX_SECONDS: Final = 10.0**9
"""The largest duration a report may carry, in seconds (about 31 years)."""
MAX_MISSES_PER_REPORT: Final = 1_000
MAX_MISSES_PER_RUN: Final = 10_000
MAX_HITS_PER_REPORT: Final = 1_000
"""The most ``hit_keys`` one report carries (the client sends the rest in its next reports)."""
REPORT_INTERVAL_SECONDS: Final = 300.0
"""How often a running job reports (the client's default; ``XLA_CACHE_REPORT_INTERVAL`` overrides it)."""

COMPONENT_NAMES: Final = (
    "computation",
    "jax_lib version",
    "backend version",
    "XLA flags",
    "compile_options",
    "accelerator_config",
    "compression",
    "custom_hook",
)
"""The components of JAX's persistent-cache key (``jax._src.cache_key``), by the names JAX logs them under
at DEBUG level (``get_cache_key hash of serialized <name>: <hex>``; the cumulative hash logged after the
last component is the hex part of the key itself, which ties the components to their key). A miss's
``components`` map uses these names; other names a later JAX adds are kept as they come."""

MissReason = Literal[
    "new_graph",  # (a) no entry of this module was ever stored in the namespace
    "new_shapes",  # (b) the module is known, at other parameter shapes
    "baked_sizes",  # (c) same module and input shapes, other sizes inside the graph (slice/pad by ints)
    "different_key",  # (c) same module and shapes, another cache key (JAX: which component differs)
    "load_failed",  # (d) the entry was stored but failed to load
    "evicted",  # (e) the entry was stored once and removed (a tombstone says when and why)
    "unknown",  # the bytes could not be read and the client knew too little
]
"""Why a run compiled a key, as the server explains each reported miss (the order the reasons are shown in;
the server asks them in its own: cache_server/runs/reasons.py)."""

MISS_REASONS: Final[tuple[MissReason, ...]] = get_args(MissReason)
"""The reasons of :data:`MissReason`, in its order."""

MISS_ADVICE: Final[dict[MissReason, str]] = {
    "new_graph": "nothing to fix: the first compile of a graph; the next job finds it stored",
    "new_shapes": "pad or bucket the varying input dimensions (xla-cache graphs NAMESPACE lists them, with "
    "what each padding choice leaves)",
    "baked_sizes": "the step takes sizes from Python integers, so each size is a new graph at the same input "
    "shapes: pass the sizes as data (masks, index tensors: docs/fixing-baked-sizes.md shows both), pad to a "
    "fixed size (xla-cache graphs NAMESPACE lists the sizes and what bucketing them leaves), or run that "
    "section eagerly",
    "different_key": "make the jobs agree on what the detail names (compile options, flags, versions); where "
    "only metadata differs, run every job with the same debug settings (XLA_HLO_DEBUG, XLA_IR_DEBUG)",
    "load_failed": "the stored entry did not load in this runtime: check versions (xla-cache doctor); the "
    "new compile replaced it",
    "evicted": "raise the namespace's quota or the server's size limit if this entry is wanted back",
    "unknown": "nothing the server can read explains it (an entry not stored, or not parseable)",
}
"""What to do about each reason (``xla-cache runs RUN``, the API and the dashboard show it)."""


def seconds_clamped(value: float) -> float:
    """A duration as the client sends it: within 0 and :data:`MAX_SECONDS`, to the millisecond (a run's
    seconds and a miss's ``compile_seconds`` alike)."""
    return round(max(0.0, min(float(value), MAX_SECONDS)), 3)


@dataclass(frozen=True)
class RunNumber:
    """One number of a run, declared once: the report's field (``name``), the API's, the stored one and
    the database column (``stored``) are all made from it.

    ``unit`` is ``count`` (an integer in ``0 .. MAX_COUNT``, stored as is) or ``seconds`` (a number in
    ``0 .. MAX_SECONDS`` on the wire, whole milliseconds in the index: ``warm_seconds`` is the column
    ``warm_ms``). ``reported``: the client sends it (False: the server works it out, as
    ``saved_seconds``). ``since``: the migration that added its column after the first (its rows before
    are 0: the column has that server default)."""

    name: str
    unit: Literal["count", "seconds"]
    doc: str = ""
    reported: bool = True
    since: str | None = None

    @property
    def stored(self) -> str:
        """The stored number's name (and column): durations in milliseconds."""
        return self.name.removesuffix("_seconds") + "_ms" if self.unit == "seconds" else self.name

    @property
    def bound(self) -> float:
        """The largest value a report may carry (larger is refused, not clipped)."""
        return MAX_SECONDS if self.unit == "seconds" else MAX_COUNT

    def clamped(self, value: float) -> int | float:
        """``value`` as the client sends it: within the bounds, durations to the millisecond."""
        if self.unit == "seconds":
            return seconds_clamped(value)
        return max(0, min(int(value), MAX_COUNT))


RUN_NUMBERS: Final = (
    RunNumber("warm_seconds", "seconds", "how long the warm took"),
    RunNumber("warm_bytes", "count", "bytes of the entries the warm left in the directory"),
    RunNumber("warm_entries", "count", "entries the warm left in the directory"),
    RunNumber("hits", "count", "persistent-cache loads"),
    RunNumber("misses", "count", "compiles"),
    RunNumber("compile_seconds", "seconds", "compile time paid"),
    RunNumber(
        "saved_seconds",
        "seconds",
        "compile time the hits saved: what each entry the run loaded cost to compile, as recorded with it",
        reported=False,
    ),
    RunNumber("uploaded_entries", "count", "entries uploaded"),
    RunNumber("live_entries", "count", "entries the follower placed"),
    RunNumber("load_failures", "count", "entries the framework failed to load"),
    RunNumber(
        "unverified_entries", "count", "entries skipped: signed by no key the job trusts", since="0012"
    ),
)
"""Every number of a run, in the order the index keeps them."""
REPORTED_NUMBERS: Final = tuple(number for number in RUN_NUMBERS if number.reported)
"""The numbers a report carries (each optional: 0 when left out)."""


def milliseconds(seconds: float) -> int:
    """``seconds`` as whole milliseconds, half a millisecond up: the one rule of the server."""
    return math.floor(seconds * 1000.0 + 0.5)


def report_numbers(measured: Mapping[str, float]) -> dict[str, int | float]:
    """The numbers of a report from what the client measured (by name; one not measured is 0), each
    within its bounds (:meth:`RunNumber.clamped`)."""
    return {number.name: number.clamped(measured.get(number.name, 0)) for number in REPORTED_NUMBERS}
