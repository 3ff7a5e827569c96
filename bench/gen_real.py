"""Fill a directory with real torch_xla persistent-cache entries (CPU), for the compression case.

A few graph families (a fuse-embedding step followed by ``depth`` dense layers), each compiled at many
shapes, as a training job with a dynamic section does: entries of one family are nearly alike. It takes
about half a second per entry on a 2-core machine, so it is run once and its output kept (the full run
reuses the directory):

    .venv/bin/python -m bench.gen_real DIR --count 300

It imports torch_xla, so the benchmark runs it in a subprocess of its own.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

DEPTHS = (1, 3, 6, 10)  # one graph family per depth: entries of about 6, 15, 30 and 50 kB
EMBED = 16


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--count", type=int, default=300, help="entries to write (shapes over all families)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PJRT_DEVICE", "CPU")

    import torch
    import torch_xla
    import torch_xla.runtime as xr

    args.directory.mkdir(parents=True, exist_ok=True)
    xr.initialize_cache(str(args.directory), readonly=False)
    device = torch_xla.device()
    weight = torch.ones(EMBED, EMBED, device=device) * 0.01
    table = torch.ones(97, EMBED, device=device) * 0.02
    started = time.monotonic()
    for index in range(args.count):
        depth = DEPTHS[index % len(DEPTHS)]
        rows = 1 + index // len(DEPTHS)  # the dynamic shape: one new graph per row count and family
        ids = torch.arange(rows, device=device) % 97
        x = torch.cat([table[ids], torch.ones(1, EMBED, device=device)], 0)
        for layer in range(depth):
            x = torch.tanh(x @ weight + layer) * 0.5
        torch_xla.sync()
    count = sum(1 for p in args.directory.iterdir() if p.is_file())
    print(f"{count} entries in {args.directory} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
