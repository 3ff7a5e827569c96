"""An unmodified torch_xla script that a launcher starts: it never imports xla_cache. Under
``XLA_CACHE_AUTO=1`` the package's start-up hook warms and uploads for each of its processes.

    python -m torch.distributed.run --nproc-per-node 2 tests/auto/torch_xla_ranks.py --shapes 3
    python tests/auto/torch_xla_ranks.py --shapes 3 --xmp     # xmp.spawn (on the CPU: one process,
                                                              # one rank thread per CPU_NUM_DEVICES)

Each rank runs one graph per shape and prints one JSON line: its process id, its rank (``RANK`` from
torchrun, the ordinal xmp.spawn passes), torch_xla's cache counters (the process's) and whether the
client was loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def steps(shapes: int) -> dict[str, Any]:
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    device = torch_xla.device()
    generator = torch.Generator().manual_seed(7)
    table = torch.randn(97, 16, generator=generator).to(device)
    for text in range(1, shapes + 1):
        ids = torch.randint(0, 97, (text,), generator=generator).to(device)
        fused = torch.nn.functional.pad(table[ids] * 2.0, (0, 0, 0, 32 - text))
        xm.mark_step()
        fused.cpu()
    counters = {name: int(met.counter_value(name) or 0) for name in ("PersistentCacheHit", "UncachedCompile")}
    return {"pid": os.getpid(), "counters": counters, "client_loaded": "xla_cache" in sys.modules}


def _rank(index: int, shapes: int) -> None:
    print(json.dumps({"rank": index, **steps(shapes)}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", type=int, default=3)
    parser.add_argument("--xmp", action="store_true", help="start the ranks with xmp.spawn")
    args = parser.parse_args()
    if args.xmp:
        import torch_xla.distributed.xla_multiprocessing as xmp

        xmp.spawn(_rank, args=(args.shapes,))  # nprocs: None (all devices) or 1, nothing else
    else:
        _rank(int(os.environ.get("RANK", "0")), args.shapes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
