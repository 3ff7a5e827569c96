"""The seed's fuse step run through torchax (PyTorch through JAX), with its sizes bucketed, and prefilled.

torchax runs the PyTorch module through ``jax.jit``, so a CPU host can compile it for every bucket before a
job starts (docs/prefill.md): ``xla-cache prefill docs.examples.fuse_torchax:make --framework torchax
--specs buckets.json`` with the file :func:`bucket_calls` writes (``python docs/examples/fuse_torchax.py
--write-specs buckets.json``). The job (``python docs/examples/fuse_torchax.py --steps 12``) pads each
batch's image and text to their buckets, so it meets only the prefilled shapes, and prints one JSON line: the
buckets it met and JAX's persistent-cache hits and misses.
"""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

import torch

SEQ = 640  # positions per fused row
HIDDEN = 256  # embedding width
BATCH = 4
IMAGE_BUCKETS = (64, 128, 256)  # image tokens, padded up to one of these
TEXT_BUCKETS = (128, 256, 384)  # text tokens, likewise


class Fuse(torch.nn.Module):
    """``[text; image; zeros]`` to ``SEQ`` rows: one graph per (image bucket, text bucket)."""

    def forward(self, image: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        fused = torch.cat([text, image], dim=1)  # [B, T + I, HIDDEN]
        return torch.nn.functional.pad(fused, (0, 0, 0, SEQ - fused.shape[1]))


def make() -> torch.nn.Module:
    """What the job passes to ``torchax.compile`` (the prefill's ``module:function``)."""
    return Fuse()


def bucket(size: int, buckets: tuple[int, ...]) -> int:
    return next(b for b in buckets if b >= size)


def bucket_calls() -> list[list[dict[str, Any]]]:
    """Every (image, text) bucket pair as a prefill's calls."""
    return [
        [
            {"shape": [BATCH, image, HIDDEN], "dtype": "float32"},
            {"shape": [BATCH, text, HIDDEN], "dtype": "float32"},
        ]
        for image in IMAGE_BUCKETS
        for text in TEXT_BUCKETS
    ]


def run(steps: int) -> dict[str, Any]:
    import jax
    import numpy as np
    import torchax
    from torchax import interop

    counts = {"cache_hits": 0, "compile_requests_use_cache": 0}

    def on_event(event: str, **_: Any) -> None:
        name = event.removeprefix("/jax/compilation_cache/")
        if name in counts:
            counts[name] += 1

    jax.monitoring.register_event_listener(on_event)
    torchax.enable_globally()
    step = torchax.compile(make())
    rng = random.Random(0)
    met = set()
    for _ in range(steps):
        image = bucket(rng.randint(1, IMAGE_BUCKETS[-1]), IMAGE_BUCKETS)
        text = bucket(rng.randint(1, TEXT_BUCKETS[-1]), TEXT_BUCKETS)
        met.add((image, text))

        def padded(rows: int) -> Any:  # made on the host and moved: no compile of its own
            return interop.torch_view(jax.device_put(np.zeros((BATCH, rows, HIDDEN), np.float32)))

        step(padded(image), padded(text)).cpu()
    hits = counts["cache_hits"]
    return {"buckets": len(met), "hits": hits, "misses": counts["compile_requests_use_cache"] - hits}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--write-specs", help="write the prefill's specs file here and stop")
    args = parser.parse_args()
    if args.write_specs:
        with open(args.write_specs, "w") as out:
            json.dump({"function": "docs.examples.fuse_torchax:make", "calls": bucket_calls()}, out)
        return
    print(json.dumps(run(args.steps)))


if __name__ == "__main__":
    main()
