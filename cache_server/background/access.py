"""Batched hit, miss and access-time accounting.

A GET must not cost a database write, so hits and misses are added up in memory and written by one
background thread every ``access_flush_seconds`` (and once more at shutdown). Each flush adds its deltas
to the stored counters, so several worker processes can flush into one database without losing counts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from cache_server import metrics
from cache_server.background.periodic import Periodic
from cache_server.domain import Clock, utcnow
from cache_server.errors import IndexUnavailable
from cache_server.index.entries import AccessDelta, EntryRepository

__all__ = ["AccessRecorder"]

log = logging.getLogger(__name__)


class AccessRecorder:
    """Collects hits and misses and writes them in batches."""

    def __init__(
        self,
        repository: EntryRepository,
        interval: float,
        clock: Clock = utcnow,
        *,
        labels: metrics.NamespaceLabels,
    ) -> None:
        self._repository = repository
        self._clock = clock
        self._labels = labels
        self._lock = threading.Lock()
        self._hits: dict[tuple[str, str], AccessDelta] = {}
        self._misses: dict[str, int] = {}
        self._flusher = Periodic("xla-cache-access-flush", "writing access counters", interval, self.flush)

    def hit(self, namespace: str, key: str, bytes_served: int, *, live: bool = False) -> None:
        """Count one use of an entry (a download, a bundle member, a signed URL handed out); ``live``: a
        delivery to a job following the namespace."""
        self.hits(namespace, [(key, bytes_served)], live=live)

    def hits(self, namespace: str, served: Sequence[tuple[str, int]], *, live: bool = False) -> None:
        """Count one use of each of ``served`` (key, bytes served) of ``namespace``: a bundle's members, in
        one go (a metric and a lock per member were a tenth of what a bundle of small entries cost)."""
        if not served:
            return
        now = self._clock()
        with self._lock:
            for key, bytes_served in served:
                delta = self._hits.setdefault((namespace, key), AccessDelta())
                delta.hits += 1
                delta.live += int(live)
                delta.bytes_served += bytes_served
                delta.last_access = now
        metrics.HITS.labels(self._labels.registered(namespace)).inc(len(served))  # a hit: it has entries

    def miss(self, namespace: str, count: int = 1) -> None:
        """Count ``count`` lookups of entries the namespace does not have."""
        with self._lock:
            self._misses[namespace] = self._misses.get(namespace, 0) + count
        metrics.MISSES.labels(self._labels.label(namespace)).inc(count)

    def flush(self) -> None:
        """Write what has been collected. On failure the counts are kept for the next try."""
        with self._lock:
            hits, self._hits = self._hits, {}
            misses, self._misses = self._misses, {}
        if not hits and not misses:
            return
        try:
            self._repository.apply_access(hits, misses, day=self._clock().date())
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
                    self._hits.setdefault(ident, AccessDelta()).merge(delta)
                for namespace, count in misses.items():
                    self._misses[namespace] = self._misses.get(namespace, 0) + count

    def start(self) -> None:
        """Write the counts every ``interval`` seconds from now on."""
        self._flusher.start()

    def stop(self) -> None:
        """Stop the periodic writes and write what is left."""
        self._flusher.stop(timeout=10)
        self.flush()
