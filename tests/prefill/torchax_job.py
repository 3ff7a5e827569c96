"""An unmodified torchax job (PyTorch through JAX) running ``tests.prefill.steps.model`` at batch sizes
FIRST..LAST (it never imports xla_cache: ``XLA_CACHE_AUTO=1`` warms it). Prints one JSON line: JAX's
persistent-cache hits and misses.

    python tests/prefill/torchax_job.py --first 1 --last 20
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import jax
import numpy as np
import torchax
from torchax import interop

from tests.prefill.steps import model

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
    torchax.enable_globally()
    step = torchax.compile(model().to("jax"))
    for batch in range(args.first, args.last + 1):
        x = interop.torch_view(jax.device_put(np.ones((batch, 16), np.float32)))  # no compile of its own
        step(x).cpu()
    torchax.disable_globally()
    hits = counts["cache_hits"]
    print(json.dumps({"hits": hits, "misses": counts["compile_requests_use_cache"] - hits}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
