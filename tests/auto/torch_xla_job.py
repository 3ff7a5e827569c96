"""An unmodified torch_xla training script: it never imports xla_cache. Under ``XLA_CACHE_AUTO=1`` the
package's start-up hook warms and uploads for it.

    python tests/auto/torch_xla_job.py --shapes 3 [--spmd]

``--spmd`` calls ``xr.use_spmd()`` after importing torch_xla, as SPMD jobs do. Prints one JSON line:
torch_xla's cache counters, whether the client was loaded, the seconds from the device query to the last
step's result (what a warm or a fill before the first compile adds to) and when that was (unix seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", type=int, default=3)
    parser.add_argument("--spmd", action="store_true")
    args = parser.parse_args()
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.runtime as xr

    if args.spmd:
        xr.use_spmd()
    started = time.perf_counter()
    device = torch_xla.device()
    generator = torch.Generator().manual_seed(7)
    table = torch.randn(97, 16, generator=generator).to(device)
    for text in range(1, args.shapes + 1):
        ids = torch.randint(0, 97, (text,), generator=generator).to(device)
        fused = torch.nn.functional.pad(table[ids] * 2.0, (0, 0, 0, 32 - text))
        xm.mark_step()
        fused.cpu()
    counters = {name: int(met.counter_value(name) or 0) for name in ("PersistentCacheHit", "UncachedCompile")}
    steps = {"step_seconds": round(time.perf_counter() - started, 3), "steps_ended_at": time.time()}
    print(json.dumps({"counters": counters, "client_loaded": "xla_cache" in sys.modules, **steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
