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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from cache_server.errors import CacheError

__all__ = [
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
    "StoredCollector",
    "multiprocess_directory",
    "namespace_label",
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
HITS = Counter(
    "xla_cache_hits", "Entries served (downloads and bundle members), by namespace.", ["namespace"]
)
MISSES = Counter("xla_cache_misses", "Entries asked for and not stored, by namespace.", ["namespace"])
EVICTIONS = Counter("xla_cache_evictions", "Entries evicted, by namespace.", ["namespace"])
EVICTED_BYTES = Counter("xla_cache_evicted_bytes", "Bytes freed by eviction, by namespace.", ["namespace"])
MEMORY_ANSWERS = Counter(
    "xla_cache_memory_answers",
    "Single reads answered from memory copies of entries read a moment ago (cache_server.hot), without "
    "the index or the store, by answer: get, head, not_modified.",
    ["answer"],
)
PACKED_LATER = Counter(
    "xla_cache_packed_later_entries",
    "Entries stored without a copy in a pack that packing later gave one (cache_server.admin.packing).",
)


MAX_NAMESPACE_LABELS = 1000
_labelled: set[str] = set()
_labelled_lock = threading.Lock()


def namespace_label(namespace: str) -> str:
    """The namespace as a label value, or ``"_other"`` once this process has seen 1,000 distinct ones.

    Misses are counted for any valid name a client asks for; made-up names must not grow every scrape.
    """
    with _labelled_lock:
        if namespace in _labelled or len(_labelled) < MAX_NAMESPACE_LABELS:
            _labelled.add(namespace)
            return namespace
    return "_other"


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


def render(stored: Collector) -> bytes:
    """The text exposition of every metric: this process's (or all workers') plus what is stored."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        body = generate_latest(registry)
    else:
        body = generate_latest(REGISTRY)
    from_index = CollectorRegistry(auto_describe=False)
    from_index.register(stored)
    return body + generate_latest(from_index)


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
