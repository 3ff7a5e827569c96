"""A PyTorch model run through torchax (which compiles with JAX), for the end-to-end tests.

``xla_cache.warm()`` with the default ``framework="auto"`` picks JAX: the job imported torchax, hence jax, and
not torch_xla. Prints one JSON line like ``jax_job.py``: JAX's cache events, the warm and upload reports
and a digest of the outputs.

    python tests/jax/torchax_job.py --server URL --cache-dir DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root, for tests.support

import xla_cache
from tests.support.jax_job_support import CacheEvents, job_arguments

BATCHES = (1, 2, 3, 5, 8)


def main() -> int:
    parser = argparse.ArgumentParser()
    args = job_arguments(parser)

    import torch
    import torchax

    events = CacheEvents()
    report = xla_cache.warm(args.server, args.cache_dir, timeout=args.timeout)  # auto: JAX

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    torchax.enable_globally()
    model = model.to("jax")
    compiled = torchax.compile(model)
    digest = hashlib.sha256()
    for batch in BATCHES:
        x = torch.arange(batch * 16, dtype=torch.float32, device="jax").reshape(batch, 16) / 100.0
        digest.update(compiled(x).cpu().detach().numpy().tobytes())
    torchax.disable_globally()
    uploaded = xla_cache.flush(timeout=args.timeout)
    print(
        json.dumps(
            {
                "hits": events.hits,
                "misses": events.misses,
                "warm": report.as_dict(),
                "uploaded": asdict(uploaded),
                "torch": torch.__version__,
                "digest": digest.hexdigest(),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
