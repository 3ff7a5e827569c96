"""An unmodified torchax script (PyTorch through JAX): it never imports xla_cache.

    python tests/auto/torchax_job.py --sizes 2

Prints one JSON line: JAX's persistent-cache hits and misses.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EVENTS = "/jax/compilation_cache/"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, default=2)
    args = parser.parse_args()
    import jax
    import torch
    import torchax

    counts = {"cache_hits": 0, "compile_requests_use_cache": 0}

    def on_event(event: str, **_: Any) -> None:
        name = event.removeprefix(EVENTS)
        if event.startswith(EVENTS) and name in counts:
            counts[name] += 1

    jax.monitoring.register_event_listener(on_event)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    torchax.enable_globally()
    step = torchax.compile(model.to("jax"))
    for batch in range(1, args.sizes + 1):
        x = torch.arange(batch * 16, dtype=torch.float32, device="jax").reshape(batch, 16) / 100.0
        step(x).cpu()
    torchax.disable_globally()
    hits = counts["cache_hits"]
    print(json.dumps({"hits": hits, "misses": counts["compile_requests_use_cache"] - hits}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
