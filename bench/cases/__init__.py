"""Every case; importing this package registers them. :data:`ORDER` is the order they run in."""

from bench.cases import compression, follow, gcs, http, index, seed, transfer

__all__ = ["ORDER", "compression", "follow", "gcs", "http", "index", "seed", "transfer"]

ORDER = (
    "tar-floor",
    "push",
    "warm",
    "get-single",
    "large-warm",
    "fleet",
    "gcs-latency",
    "compression",
    "follow",
    "index-scale",
    "seed-e2e",
)
