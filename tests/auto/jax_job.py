"""An unmodified JAX script: it never imports xla_cache. Under ``XLA_CACHE_AUTO=1`` the package's start-up
hook warms and uploads for it.

    python tests/auto/jax_job.py --sizes 3 [--processes 2]
    python tests/auto/jax_job.py --sizes 3 --coordinator 127.0.0.1:PORT --process-id I --process-count 2

One jit-compiled step per size. With ``--processes N`` the step runs in N processes that
``multiprocessing`` starts with ``spawn`` (each a new interpreter, as launchers start ranks). Prints one
JSON line per process: JAX's persistent-cache hits and misses (compiles that consulted the cache and did
not find their executable). With ``--coordinator`` the process is one of a multi-host job
(``jax.distributed.initialize``), as each host of a TPU pod slice runs it: its step is computed on one
array spread over every process's devices, and it also prints its ``process_index``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

EVENTS = "/jax/compilation_cache/"


def work(sizes: int, *, global_arrays: bool = False) -> dict[str, Any]:
    counts = {"cache_hits": 0, "compile_requests_use_cache": 0}

    def on_event(event: str, **_: Any) -> None:
        name = event.removeprefix(EVENTS)
        if event.startswith(EVENTS) and name in counts:
            counts[name] += 1

    jax.monitoring.register_event_listener(on_event)
    if global_arrays:  # one array over every process's devices, as a multi-host SPMD job computes
        mesh = jax.sharding.Mesh(np.array(jax.devices()), ("hosts",))
        rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("hosts"))
        spread = jax.jit(lambda x: jnp.tanh(x) * 2.0)
        for size in range(1, sizes + 1):
            shape = (len(jax.devices()) * size, 8)
            ones = np.ones(shape, np.float32)
            spread(
                jax.make_array_from_callback(shape, rows, lambda index, ones=ones: ones[index])
            ).block_until_ready()
    else:
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
    parser.add_argument("--coordinator", help="host:port of process 0 (a multi-host job)")
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--process-count", type=int, default=1)
    args = parser.parse_args()
    if args.coordinator:
        jax.distributed.initialize(args.coordinator, args.process_count, args.process_id)
        print(json.dumps({**work(args.sizes, global_arrays=True), "process_index": jax.process_index()}))
        return 0
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
