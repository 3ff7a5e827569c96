"""What the JAX job scripts share: their command line, logging, and JAX's own cache events."""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from typing import Any

__all__ = ["CacheEvents", "job_arguments"]

EVENTS = "/jax/compilation_cache/"


def job_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Add ``--server``, ``--cache-dir`` and ``--timeout``, parse, and log to stderr."""
    parser.add_argument("--server")
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return args


class CacheEvents:
    """Counts JAX's ``/jax/compilation_cache/*`` monitoring events from the moment it is made."""

    def __init__(self) -> None:
        import jax

        self.counts: Counter[str] = Counter()
        jax.monitoring.register_event_listener(self._on_event)

    def _on_event(self, event: str, **_: Any) -> None:
        if event.startswith(EVENTS):
            self.counts[event.removeprefix(EVENTS)] += 1

    @property
    def hits(self) -> int:
        """Executables loaded from the persistent cache."""
        return self.counts["cache_hits"]

    @property
    def misses(self) -> int:
        """Compilations that consulted the cache and did not find their executable (JAX's own
        ``cache_misses`` counts the entries it wrote, which is not the same)."""
        return self.counts["compile_requests_use_cache"] - self.hits
