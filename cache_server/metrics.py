"""Prometheus metrics of the server, and how ``/metrics`` renders them.

Counters and histograms are process-local (prometheus-client's default registry). With several uvicorn
workers ``xla-cache-server serve`` points ``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before the
workers start, each worker's values go to files there, and a scrape of any worker sums them all. What is
stored (entries and bytes per namespace) is read from the index at scrape time, so it is right whichever
worker answers and whatever the other workers did.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from cache_server.errors import CacheError

__all__ = [
    "BULK_MEMBERS",
    "BYTES_RECEIVED",
    "BYTES_SENT",
    "CONTENT_TYPE",
    "EVICTED_BYTES",
    "EVICTIONS",
    "HITS",
    "MEMORY_ANSWERS",
    "MISSES",
    "MULTIPROC_ENV",
    "PACKED_LATER",
    "REQUESTS",
    "REQUEST_SECONDS",
    "RUNS",
    "RUN_COMPILE_SECONDS",
    "RUN_HITS",
    "RUN_MISSES",
    "RUN_SAVED_SECONDS",
    "UNKNOWN_NAMESPACE",
    "NamespaceLabels",
    "StorageBudgetCollector",
    "StoredCollector",
    "multiprocess_directory",
    "render",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST

REQUESTS = Counter(
    "xla_cache_http_requests",
    "HTTP requests answered, by route, method and status.",
    ["route", "method", "status"],
)
REQUEST_SECONDS = Histogram(
    "xla_cache_http_request_duration_seconds",
    "Time from a request's arrival to the last byte of its response, by route and method.",
    ["route", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
BYTES_RECEIVED = Counter("xla_cache_http_received_bytes", "Request body bytes received, by route.", ["route"])
BYTES_SENT = Counter("xla_cache_http_sent_bytes", "Response body bytes sent, by route.", ["route"])
BULK_MEMBERS = Counter(
    "xla_cache_bulk_members",
    "Members of bulk uploads answered, by the status a PUT of each would have had (201 stored, 200 stored "
    "already, 409, and the refusals: 400, 413, 507...); the request itself is 200.",
    ["status"],
)
HITS = Counter(
    "xla_cache_hits", "Entries served (downloads and bundle members), by namespace.", ["namespace"]
)
MISSES = Counter("xla_cache_misses", "Entries asked for and not stored, by namespace.", ["namespace"])
EVICTIONS = Counter("xla_cache_evictions", "Entries evicted, by namespace.", ["namespace"])
EVICTED_BYTES = Counter("xla_cache_evicted_bytes", "Bytes freed by eviction, by namespace.", ["namespace"])
MEMORY_ANSWERS = Counter(
    "xla_cache_memory_answers",
    "Single reads answered from memory copies of entries read a moment ago (service/hot.py), without "
    "the index or the store, by answer: get, head, not_modified.",
    ["answer"],
)
PACKED_LATER = Counter(
    "xla_cache_packed_later_entries",
    "Entries stored without a copy in a pack that packing later gave one (cache_server.admin.packing).",
)

RUNS = Counter("xla_cache_runs", "Runs first reported (POST /v1/runs), by framework.", ["framework"])
RUN_HITS = Counter(
    "xla_cache_run_hits", "Persistent-cache loads the runs reported, by framework.", ["framework"]
)
RUN_MISSES = Counter(
    "xla_cache_run_misses", "Compiles (misses) the runs reported, by framework.", ["framework"]
)
RUN_COMPILE_SECONDS = Counter(
    "xla_cache_run_compile_seconds", "Compile seconds the runs reported paying, by framework.", ["framework"]
)
RUN_SAVED_SECONDS = Counter(
    "xla_cache_run_saved_seconds",
    "Compile seconds the runs' hits saved (the stored entries' compile times), by framework.",
    ["framework"],
)


UNKNOWN_NAMESPACE = "_unknown"
"""The one label of every namespace the index has no row for (misses on made-up names)."""
LABEL_REFRESH_SECONDS = 5.0
"""At most one read of the registered names per this many seconds, however many unknown names come."""


class NamespaceLabels:
    """The ``namespace`` label values: a namespace's own name once it is registered (it has a row in the
    index, made by ``PUT /v1/namespaces/{ns}`` or its first stored entry), else :data:`UNKNOWN_NAMESPACE`.

    Labels grow only with the registered namespaces (as ``xla_cache_stored_*`` do), never with the names
    clients make up, and no cap ever hides a registered one. The registered names are read from the index,
    so a namespace another worker or replica registered gets its own label here too: an unknown name
    re-reads them, at most once per ``refresh_seconds`` (a flood of made-up names costs one query per
    period), and a name counted by its hits (which only a stored entry has) is known at once.
    """

    def __init__(
        self,
        registered_names: Callable[[], Iterable[str]],
        *,
        refresh_seconds: float = LABEL_REFRESH_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registered_names = registered_names
        self._refresh_seconds = refresh_seconds
        self._monotonic = monotonic
        self._known: frozenset[str] = frozenset()
        self._learned: set[str] = set()
        self._read_at: float | None = None
        self._lock = threading.Lock()
        self.reads = 0
        """How many times the registered names were read (for tests and the curious)."""

    def label(self, namespace: str) -> str:
        """The label of ``namespace``: its name if it is registered, else ``_unknown``."""
        if namespace in self._known or namespace in self._learned:
            return namespace
        if self._refresh() and namespace in self._known:
            return namespace
        return UNKNOWN_NAMESPACE

    def registered(self, namespace: str) -> str:
        """The label of a namespace known to be registered (it has an entry): its own name, remembered."""
        if namespace not in self._known:
            self._learned.add(namespace)  # one bytecode under the GIL: no lock, never a wait on a refresh
        return namespace

    def _refresh(self) -> bool:
        """Read the registered names again unless they were read less than ``refresh_seconds`` ago (or
        another thread is reading them now). True if this call read them."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            now = self._monotonic()
            if self._read_at is not None and now - self._read_at < self._refresh_seconds:
                return False
            self._read_at = now
            try:
                names = frozenset(self._registered_names())
            except CacheError:  # the index is down: the names known so far stay, the rest are unknown
                return False
            self.reads += 1
            self._known = names
            self._learned = set()  # what the index says now wins (a deleted namespace loses its label)
            return True
        finally:
            self._lock.release()


class StoredCollector(Collector):
    """Entries and bytes stored per namespace, read from the index at each scrape."""

    def __init__(self, stored_by_namespace: Callable[[], Mapping[str, tuple[int, int]]]) -> None:
        self._stored = stored_by_namespace

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("xla_cache_index_up", "1 when the index answered this scrape, else 0.")
        try:
            stored = self._stored()
        except CacheError:  # the index is down: still serve every other metric
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        entries = GaugeMetricFamily(
            "xla_cache_stored_entries", "Entries stored now, by namespace.", labels=["namespace"]
        )
        size = GaugeMetricFamily(
            "xla_cache_stored_bytes", "Bytes stored now, by namespace.", labels=["namespace"]
        )
        for namespace, (count, total) in sorted(stored.items()):
            entries.add_metric([namespace], count)
            size.add_metric([namespace], total)
        yield entries
        yield size


class StorageBudgetCollector(Collector):
    """The configured storage budget (``XLA_CACHE_MAX_TOTAL_BYTES``), 0 when none is set: the same in every
    worker, so it is rendered at scrape time rather than kept per process."""

    def __init__(self, budget_bytes: int | None) -> None:
        self._budget = budget_bytes or 0

    def collect(self) -> Iterator[Metric]:
        budget = GaugeMetricFamily(
            "xla_cache_storage_budget_bytes",
            "The storage budget background eviction keeps the whole store under (XLA_CACHE_MAX_TOTAL_BYTES), "
            "0 when none is set.",
        )
        budget.add_metric([], self._budget)
        yield budget


def render(*at_scrape: Collector) -> bytes:
    """The text exposition of every metric: this process's (or all workers') plus those ``at_scrape``
    collects now (what is stored, the budget)."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        body = generate_latest(registry)
    else:
        body = generate_latest(REGISTRY)
    now = CollectorRegistry(auto_describe=False)
    for collector in at_scrape:
        now.register(collector)
    return body + generate_latest(now)


@contextmanager
def multiprocess_directory(workers: int) -> Iterator[str | None]:
    """With more than one worker, a fresh ``PROMETHEUS_MULTIPROC_DIR`` for the workers, removed afterwards.

    Must be entered before the workers start (they read the variable when they import prometheus-client).
    A directory the operator set already is used as it is and left alone.
    """
    if workers <= 1 or os.environ.get(MULTIPROC_ENV):
        yield os.environ.get(MULTIPROC_ENV)
        return
    path = tempfile.mkdtemp(prefix="xla-cache-metrics-")
    os.environ[MULTIPROC_ENV] = path
    try:
        yield path
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(path, ignore_errors=True)
