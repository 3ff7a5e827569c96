"""Batched hit, miss and access-time accounting.

A GET must not cost a database write, so hits and misses are added up in memory and written by one
background thread every ``access_flush_seconds`` (and once more at shutdown). Each flush adds its deltas
to the stored counters, so several worker processes can flush into one database without losing counts.
"""

from __future__ import annotations

import logging
import threading

from cache_server import metrics
from cache_server.errors import IndexUnavailable
from cache_server.index.models import utcnow
from cache_server.index.repository import AccessDelta, IndexRepository

__all__ = ["AccessRecorder"]

log = logging.getLogger(__name__)


class AccessRecorder:
    """Collects hits and misses and writes them in batches."""

    def __init__(self, repository: IndexRepository, interval: float) -> None:
        self._repository = repository
        self._interval = interval
        self._lock = threading.Lock()
        self._hits: dict[tuple[str, str], AccessDelta] = {}
        self._misses: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hit(self, namespace: str, key: str, bytes_served: int) -> None:
        now = utcnow()
        with self._lock:
            delta = self._hits.setdefault((namespace, key), AccessDelta())
            delta.hits += 1
            delta.bytes_served += bytes_served
            delta.last_access = now
        metrics.HITS.labels(metrics.namespace_label(namespace)).inc()

    def miss(self, namespace: str, count: int = 1) -> None:
        with self._lock:
            self._misses[namespace] = self._misses.get(namespace, 0) + count
        metrics.MISSES.labels(metrics.namespace_label(namespace)).inc(count)

    def flush(self) -> None:
        """Write what has been collected. On failure the counts are kept for the next try."""
        with self._lock:
            hits, self._hits = self._hits, {}
            misses, self._misses = self._misses, {}
        if not hits and not misses:
            return
        try:
            self._repository.apply_access(hits, misses)
        except Exception as exc:
            # An unreachable index is an outage, already explained; anything else is worth a traceback.
            outage = isinstance(exc, IndexUnavailable)
            log.warning(
                "could not write access counters (%s); keeping them for the next flush",
                exc.detail if isinstance(exc, IndexUnavailable) else type(exc).__name__,
                exc_info=not outage,
            )
            with self._lock:
                for ident, delta in hits.items():
                    kept = self._hits.setdefault(ident, AccessDelta())
                    kept.hits += delta.hits
                    kept.bytes_served += delta.bytes_served
                    if kept.last_access is None or (
                        delta.last_access and delta.last_access > kept.last_access
                    ):
                        kept.last_access = delta.last_access
                for namespace, count in misses.items():
                    self._misses[namespace] = self._misses.get(namespace, 0) + count

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="xla-cache-access-flush", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()
