"""An unmodified JAX script: it never imports xla_cache. Under ``XLA_CACHE_AUTO=1`` the package's start-up
hook warms and uploads for it.

    python tests/auto/jax_job.py --sizes 3 [--processes 2]

One jit-compiled step per size. With ``--processes N`` the step runs in N processes that
``multiprocessing`` starts with ``spawn`` (each a new interpreter, as launchers start ranks). Prints one
JSON line per process: JAX's persistent-cache hits and misses (compiles that consulted the cache and did
not find their executable).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from typing import Any

import jax
import jax.numpy as jnp

EVENTS = "/jax/compilation_cache/"


def work(sizes: int) -> dict[str, Any]:
    counts = {"cache_hits": 0, "compile_requests_use_cache": 0}

    def on_event(event: str, **_: Any) -> None:
        name = event.removeprefix(EVENTS)
        if event.startswith(EVENTS) and name in counts:
            counts[name] += 1

    jax.monitoring.register_event_listener(on_event)
    step = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
    for size in range(1, sizes + 1):
        step(jnp.ones((size, 8))).block_until_ready()
    hits = counts["cache_hits"]
    return {
        "hits": hits,
        "misses": counts["compile_requests_use_cache"] - hits,
        "client": "xla_cache" in sys.modules,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, default=3)
    parser.add_argument("--processes", type=int, default=0)
    args = parser.parse_args()
    if not args.processes:
        print(json.dumps(work(args.sizes)))
        return 0
    pool = multiprocessing.get_context("spawn").Pool(args.processes)
    results = pool.map(work, [args.sizes] * args.processes)
    pool.close()  # the ranks end as processes do (their exit uploads and reports), not terminated
    pool.join()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
