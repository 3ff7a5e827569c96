"""A training-like job for the end-to-end tests: a dynamic fuse-embedding step, one graph per shape.

Like the user's multimodal model: image tokens and text tokens of varying counts are embedded, concatenated
and padded to a fixed length. Every (image count, text count) pair is a new XLA graph. The job warms the
cache with ``xla_cache.warm()`` first (unless ``--no-warm``), runs the shapes, flushes uploads, and prints one
JSON line: torch_xla's cache counters, the warm and upload reports, a digest of every output and the run as
its reports tell it (``xla_cache.run_report()``).

    python tests/e2e/fuse_job.py --server URL --cache-dir DIR --shapes 60 [--spmd] [--corrupt-local]
        [--order-seed N] [--follow] [--no-warm | --no-cache] [--seq-len 128]

With ``--order-seed`` the shapes run in an order shuffled by that seed, each with inputs drawn from its own
shape (so jobs in different orders compute the same outputs), and the digests are keyed by shape.
``--follow`` warms with ``follow=True``: entries other jobs store meanwhile arrive while this one runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import xla_cache

PATCHES_PER_IMAGE = 4
EMBED_DIM = 32
VOCAB = 97
SEQ_LEN = 64


def shapes(count: int, seq_len: int = SEQ_LEN) -> list[tuple[int, int]]:
    """``count`` distinct (images, text tokens) pairs that fit in ``seq_len`` (at most 240 at the default
    64; 2,112 at 128, for the benchmark's 2,000-shape seed workload)."""
    if seq_len == SEQ_LEN:
        pairs = [(images, text) for text in range(1, 41) for images in range(0, 6)]
    else:
        pairs = [
            (images, text)
            for images in range(seq_len // PATCHES_PER_IMAGE)
            for text in range(1, seq_len - images * PATCHES_PER_IMAGE + 1)
        ]
    if count > len(pairs):
        raise SystemExit(f"--shapes {count}: only {len(pairs)} distinct shapes fit in --seq-len {seq_len}")
    return pairs[:count]


def baked_step(
    patches: Any, ids: Any, table: Any, projection: Any, images: int, text: int, seq_len: int
) -> Any:
    """The seed's ``fuse_embedding``: sizes from Python integers slice inputs of one padded shape."""
    import torch

    image_embeddings = patches[: images * PATCHES_PER_IMAGE] @ projection
    text_embeddings = table[ids[:text]]
    fused = torch.cat([image_embeddings, text_embeddings], dim=0)
    return torch.nn.functional.pad(fused, (0, 0, 0, seq_len - fused.shape[0]))


def thread_cpu() -> dict[int, tuple[str, float]]:
    """Each thread of this process: its name (a Python thread's, else the kernel's ``comm``) and CPU
    seconds so far (``/proc/self/task/<tid>/stat``: user and system time), by native thread id; empty
    where unknown."""
    names = {thread.native_id: thread.name for thread in threading.enumerate() if thread.native_id}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    found: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return found
    for tid in map(int, tids):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        seconds = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15 of stat)
        found[tid] = (names.get(tid, f"({comm})"), seconds)
    return found


def cpu_by_thread(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """The CPU seconds each thread spent between two :func:`thread_cpu` looks, summed by name (threads
    that began meanwhile count from zero)."""
    spent: dict[str, float] = {}
    for tid, (name, seconds) in after.items():
        grown = seconds - before.get(tid, (name, 0.0))[1]
        if grown > 0:
            spent[name] = round(spent.get(name, 0.0) + grown, 3)
    return dict(sorted(spent.items(), key=lambda item: -item[1]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server")
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--shapes", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--spmd", action="store_true")
    parser.add_argument("--no-warm", action="store_true", help="initialize the cache directly (baseline)")
    parser.add_argument("--no-cache", action="store_true", help="no persistent cache at all (a cold job)")
    parser.add_argument("--seq-len", type=int, default=SEQ_LEN, help="the padded length (more shapes fit)")
    parser.add_argument("--corrupt-local", action="store_true", help="damage the warmed files before running")
    parser.add_argument("--no-flush", action="store_true", help="leave the uploads to the exit handler")
    parser.add_argument("--order-seed", type=int, help="run the shapes in this shuffled order")
    parser.add_argument("--follow", action="store_true", help="follow the namespace while running")
    parser.add_argument("--no-upload", action="store_true", help="warm without the uploader's uploads")
    parser.add_argument(
        "--baked",
        action="store_true",
        help="the seed's own pattern: inputs at one padded shape, sliced by Python integers (sizes baked in)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)

    import numpy as np
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    if args.spmd:
        xr.use_spmd()

    started = time.monotonic()
    if args.no_cache:
        warm_report = None
    elif args.no_warm:
        xr.initialize_cache(args.cache_dir, readonly=False)
        warm_report = None
    else:
        warm_report = xla_cache.warm(
            args.server, args.cache_dir, timeout=args.timeout, follow=args.follow, upload=not args.no_upload
        )
    warm_seconds = time.monotonic() - started
    if args.corrupt_local and warm_report is not None:
        for item in Path(warm_report.cache_dir).iterdir():
            if not item.name.startswith("."):
                item.write_bytes(b"not an executable" * 10)

    device = torch_xla.device()
    mesh = None
    if args.spmd:
        import torch_xla.distributed.spmd as xs

        count = xr.global_runtime_device_count()
        mesh = xs.Mesh(np.arange(count), (1, count), ("data", "model"))

    generator = torch.Generator().manual_seed(1234)
    table_cpu = torch.randn(VOCAB, EMBED_DIM, generator=generator)
    projection_cpu = torch.randn(EMBED_DIM, EMBED_DIM, generator=generator)
    table = table_cpu.to(device)
    projection = projection_cpu.to(device)
    if mesh is not None:
        import torch_xla.distributed.spmd as xs

        xs.mark_sharding(table, mesh, (None, "model"))

    digests = []
    order = shapes(args.shapes, args.seq_len)
    if args.order_seed is not None:
        import random

        random.Random(args.order_seed).shuffle(order)
    by_shape: dict[str, str] = {}
    loop_started = time.monotonic()
    loop_cpu_started = time.process_time()
    loop_thread_started = time.thread_time()
    threads_started = thread_cpu()
    if args.baked:  # one input shape for every step: the sizes are Python integers, constants in the graph
        most = max(images for images, _ in order) * PATCHES_PER_IMAGE
        all_patches = torch.randn(max(most, 1), EMBED_DIM, generator=generator).to(device)
        all_ids = torch.randint(0, VOCAB, (args.seq_len,), generator=generator).to(device)
    for images, text in order:
        if args.baked:
            padded = baked_step(all_patches, all_ids, table, projection, images, text, args.seq_len)
            xm.mark_step()
            digests.append(hashlib.sha256(padded.cpu().numpy().tobytes()).hexdigest())
            by_shape[f"{images}x{text}"] = digests[-1]
            continue
        if args.order_seed is not None:  # inputs of the shape's own: the same in every order
            generator = torch.Generator().manual_seed(1000 * images + text)
        patches = torch.randn(images * PATCHES_PER_IMAGE, EMBED_DIM, generator=generator).to(device)
        token_ids = torch.randint(0, VOCAB, (text,), generator=generator).to(device)
        image_embeddings = patches @ projection
        text_embeddings = table[token_ids]
        fused = torch.cat([image_embeddings, text_embeddings], dim=0)
        padded = torch.nn.functional.pad(fused, (0, 0, 0, args.seq_len - fused.shape[0]))
        if mesh is not None:
            import torch_xla.distributed.spmd as xs

            xs.mark_sharding(padded, mesh, (None, "model"))
        xm.mark_step()
        digests.append(hashlib.sha256(padded.cpu().numpy().tobytes()).hexdigest())
        by_shape[f"{images}x{text}"] = digests[-1]
    loop_seconds = time.monotonic() - loop_started
    loop_cpu_seconds = time.process_time() - loop_cpu_started  # every thread: the job's and the client's
    loop_thread_seconds = time.thread_time() - loop_thread_started  # the job's own thread
    loop_threads = cpu_by_thread(threads_started, thread_cpu())  # each thread's share (clock ticks)

    upload = xla_cache.UploadReport() if args.no_flush else xla_cache.flush()
    import torch_xla.debug.metrics as met

    counters = {
        name: int(met.counter_value(name) or 0)
        for name in (
            "PersistentCacheHit",
            "PersistentCacheMiss",
            "UncachedCompile",
            "PersistentCacheDeserializeFailure",
        )
    }
    print(
        json.dumps(
            {
                "counters": counters,
                "graphs": len(digests),
                "digests": digests,
                "digests_by_shape": by_shape,
                "loop_seconds": loop_seconds,
                "loop_cpu_seconds": loop_cpu_seconds,
                "loop_thread_seconds": loop_thread_seconds,
                "loop_cpu_by_thread": loop_threads,
                "warm": warm_report.as_dict() if warm_report else None,
                "warm_seconds": warm_seconds,
                "upload": upload.__dict__,
                "pid": os.getpid(),
                "run": xla_cache.run_report(),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
