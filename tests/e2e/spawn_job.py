"""A multi-process job without SPMD (``xmp.spawn``, one process per CPU device) for the e2e tests.

Each rank warms the shared base cache directory, runs the same fuse-embedding shapes on its own device,
flushes, and prints one JSON line prefixed with ``RESULT``.

    CPU_NUM_DEVICES=2 python tests/e2e/spawn_job.py --server URL --cache-dir DIR --shapes 8
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import threading

_PRINT_LOCK = threading.Lock()


def rank_main(index: int, args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    import xla_cache

    report = xla_cache.warm(args.server, args.cache_dir, timeout=30)
    device = torch_xla.device()
    generator = torch.Generator().manual_seed(7)
    table = torch.randn(97, 16, generator=generator).to(device)
    digests = []
    for text in range(1, args.shapes + 1):
        ids = torch.randint(0, 97, (text,), generator=generator).to(device)
        fused = torch.nn.functional.pad(table[ids] * 2.0, (0, 0, 0, 32 - text))
        xm.mark_step()
        digests.append(hashlib.sha256(fused.cpu().numpy().tobytes()).hexdigest())
    upload = xla_cache.flush()
    counters = {
        name: int(met.counter_value(name) or 0)
        for name in ("PersistentCacheHit", "UncachedCompile", "PersistentCacheDeserializeFailure")
    }
    result = {
        "rank": index,
        "device": str(device),
        "namespace": report.namespace,
        "cache_dir": report.cache_dir,
        "downloaded": report.downloaded_entries,
        "errors": report.errors,
        "uploaded": upload.uploaded,
        "counters": counters,
        "digests": digests,
    }
    # Ranks are threads of one process: one write per line under a lock, or two lines can interleave.
    with _PRINT_LOCK:
        sys.stdout.write("RESULT " + json.dumps(result) + "\n")
        sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--shapes", type=int, default=8)
    args = parser.parse_args()
    import torch_xla.distributed.xla_multiprocessing as xmp

    # fork: the rank process starts without importing torch_xla again (its runtime is not started yet).
    xmp.spawn(rank_main, args=(args,), start_method="fork")
    return 0


if __name__ == "__main__":
    sys.exit(main())
