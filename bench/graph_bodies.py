"""``python -m bench.graph_bodies [--reps N]``: what reading a graph's body (issue 33: every instruction
walked, the digests and sized ops of ``cache_server.parsing.instructions``) costs the parser per entry.

Makes real JAX CPU entries first (not timed): a small function (~2 KB), a chain of 12,000 ops (~0.5 MB,
~13,000 instructions: the instruction walk's worst case per byte), and a function with a random f32
constant of 1 MB and of 50 MB (a module whose bytes are mostly one literal). For each, the CPU seconds and
the peak of Python's allocations (tracemalloc) of :func:`~cache_server.parsing.hlo.parse_entry` as the
server runs it, and of the same parse with the body left out (what it cost before), medians of ``--reps``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

from cache_server.parsing import hlo

CASES = (
    ("small", 0, 0),
    ("chain-12000-ops", 12_000, 0),
    ("literal-1MB", 0, 1 << 18),
    ("literal-50MB", 0, 50 << 18),
)


def make_entries(directory: Path) -> dict[str, Path]:
    """One real JAX CPU entry per case (compiled here, in this process)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    made: dict[str, Path] = {}
    for name, ops, floats in CASES:
        before = set(directory.glob("jit_*-cache"))
        if ops:

            def chain(x: Any, ops: int = ops) -> Any:
                for i in range(ops):
                    x = jnp.sin(x[: x.shape[0] - (i % 2)]) * (i + 1.5)
                return x

            jax.jit(chain)(jnp.ones(40_960)).block_until_ready()
        elif floats:
            weights = np.random.RandomState(0).randn(floats).astype(np.float32)

            def scaled(x: Any, weights: Any = weights) -> Any:
                return x * weights

            jax.jit(scaled)(jnp.ones(floats)).block_until_ready()
        else:
            jax.jit(lambda x: jnp.sin(x) + 1.0)(jnp.ones(8)).block_until_ready()
        new = sorted(set(directory.glob("jit_*-cache")) - before, key=lambda p: p.stat().st_size)
        made[name] = new[-1]  # the function's own entry (not the small helpers JAX compiles beside it)
    return made


def measure(data: bytes, parse: Callable[[list[bytes]], object], reps: int) -> tuple[float, float]:
    """Median CPU seconds and median peak MiB of Python allocations of ``parse``."""
    seconds: list[float] = []
    peaks: list[float] = []
    for _ in range(reps):
        started = time.process_time()
        parse([data])
        seconds.append(time.process_time() - started)
        tracemalloc.start()
        parse([data])
        peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
    return statistics.median(seconds), statistics.median(peaks)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="make the entries in this directory, and keep them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        entries = make_entries(directory)
        print(f"{'entry':<18} {'bytes':>10} {'instructions':>12}  {'with body':>22}  {'without body':>22}")
        for name, path in entries.items():
            data = path.read_bytes()
            info = hlo.parse_entry([data])
            count = info.body.instructions if info is not None and info.body is not None else 0
            with_body = measure(data, hlo.parse_entry, args.reps)
            with mock.patch.object(hlo, "read_body", lambda *_: None):
                without = measure(data, hlo.parse_entry, args.reps)
            print(
                f"{name:<18} {len(data):>10,} {count:>12,}  "
                f"{with_body[0] * 1000:>9.2f} ms {with_body[1]:>7.1f} MiB  "
                f"{without[0] * 1000:>9.2f} ms {without[1]:>7.1f} MiB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
