"""An unmodified JAX job running ``tests.prefill.steps.step`` at batch sizes 1..N (it never imports
xla_cache: ``XLA_CACHE_AUTO=1`` warms it). Prints one JSON line: JAX's persistent-cache hits and misses.

    python tests/prefill/job.py --first 1 --last 50
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import jax
import numpy as np

from tests.prefill.steps import WIDTH, step

EVENTS = "/jax/compilation_cache/"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("--last", type=int, default=3)
    args = parser.parse_args()
    counts = {"cache_hits": 0, "compile_requests_use_cache": 0}

    def on_event(event: str, **_: Any) -> None:
        name = event.removeprefix(EVENTS)
        if event.startswith(EVENTS) and name in counts:
            counts[name] += 1

    jax.monitoring.register_event_listener(on_event)
    for size in range(args.first, args.last + 1):
        step(np.ones((size, WIDTH), np.float32)).block_until_ready()  # numpy: no compile but the step's
    hits = counts["cache_hits"]
    print(json.dumps({"hits": hits, "misses": counts["compile_requests_use_cache"] - hits}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
