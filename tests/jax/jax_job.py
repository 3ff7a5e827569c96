"""A JAX job for the end-to-end tests: one jit-compiled function run at many input shapes.

It warms with ``xla_cache.warm(framework="jax")`` first (unless ``--no-warm``, which points JAX at the
directory itself, as a job without this client would), runs the shapes with NumPy inputs (so the only
compilations are the function's), flushes uploads and prints one JSON line: JAX's own cache events, the warm
and upload reports, the entry files and a digest of every output.

    python tests/jax/jax_job.py --server URL --cache-dir DIR --shapes 30 [--no-warm]
        [--order-seed N] [--follow]

``--order-seed`` runs the shapes in that shuffled order (digests keyed by shape too); ``--first-shape N`` runs
the shapes N .. N+shapes-1 instead of 1 .. shapes; ``--compiler-option NAME=VALUE`` (repeatable) compiles
with ``jax.jit(..., compiler_options=...)``, a per-call option that changes JAX's key (its compile_options
component) and not the namespace; ``--follow`` warms with ``follow=True``; ``--then-wait`` prints
``COMPILED`` after the shapes and waits to be killed; ``--baked`` runs the seed's pattern instead: x at one
shape, sliced and padded by a static Python integer (one graph per n at the same input shape). The JSON line
also holds the run as its reports tell it (``xla_cache.run_report()``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root, for tests.support

import xla_cache
from tests.support.jax_job_support import CacheEvents, job_arguments

BAKED_ROWS = 16  # --baked: x is 16x4 for every n (n < 16)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", type=int, default=30)
    parser.add_argument("--no-warm", action="store_true", help="point JAX at the directory itself")
    parser.add_argument("--order-seed", type=int, help="run the shapes in this shuffled order")
    parser.add_argument("--first-shape", type=int, default=1, help="the first shape's row count")
    parser.add_argument(
        "--compiler-option", action="append", default=[], help="NAME=VALUE, passed to jax.jit"
    )
    parser.add_argument("--follow", action="store_true", help="follow the namespace while running")
    parser.add_argument("--then-wait", action="store_true", help="after the shapes, wait to be killed")
    parser.add_argument(
        "--baked",
        action="store_true",
        help="x at one shape (16x4), sliced and padded by a static Python integer (sizes baked in)",
    )
    args = job_arguments(parser)

    import jax
    import jax.numpy as jnp
    import numpy as np

    events = CacheEvents()
    if args.no_warm:
        jax.config.update("jax_compilation_cache_dir", args.cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        warm: dict[str, Any] = {}
        directory = Path(args.cache_dir)
    else:
        report = xla_cache.warm(
            args.server, args.cache_dir, framework="jax", timeout=args.timeout, follow=args.follow
        )
        warm = report.as_dict()
        directory = Path(report.cache_dir)

    options: dict[str, str | bool] = {}
    for option in args.compiler_option:
        name, value = option.split("=", 1)
        options[name] = {"true": True, "false": False}.get(value, value)  # XLA wants a bool, not 'true'

    def step(x: jax.Array) -> jax.Array:
        return jnp.tanh(x @ x.T).sum(axis=0) * 2.0 + 1.0

    jitted = jax.jit(step, compiler_options=options or None)  # its module: jit_step

    def baked_step(x: jax.Array, n: int) -> jax.Array:
        return jnp.pad(jnp.tanh(x[:n]) * 2.0, ((0, BAKED_ROWS - n), (0, 0))).sum(axis=1)

    baked = jax.jit(baked_step, static_argnums=1)  # its module: jit_baked_step, one per n at one shape

    digest = hashlib.sha256()
    order = list(range(args.first_shape, args.first_shape + args.shapes))
    if args.order_seed is not None:
        import random

        random.Random(args.order_seed).shuffle(order)
    by_shape: dict[int, str] = {}
    for n in order:
        if args.baked:
            x = (np.arange(BAKED_ROWS * 4, dtype=np.float32).reshape(BAKED_ROWS, 4) / 10.0).astype(np.float32)
            out = np.asarray(baked(x, n)).tobytes()
        else:
            x = (np.arange(n * 4, dtype=np.float32).reshape(n, 4) / 10.0).astype(np.float32)
            out = np.asarray(jitted(x)).tobytes()
        digest.update(out)
        by_shape[n] = hashlib.sha256(out).hexdigest()
    if args.then_wait:
        print("COMPILED", flush=True)
        threading.Event().wait()
    uploaded = asdict(xla_cache.flush(timeout=args.timeout)) if not args.no_warm else {}
    print(
        json.dumps(
            {
                "events": dict(events.counts),
                "hits": events.hits,
                "misses": events.misses,
                "warm": warm,
                "uploaded": uploaded,
                "entries": sorted(p.name for p in directory.iterdir() if p.is_file()),
                "digest": digest.hexdigest(),
                "digests_by_shape": by_shape,
                "run": xla_cache.run_report(),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
