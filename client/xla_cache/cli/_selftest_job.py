"""One process of ``xla-cache doctor``'s self-test: compile a few tiny graphs with the persistent cache on.

Run as ``python -m xla_cache.cli._selftest_job <cache_dir>``. Prints one JSON line: torch_xla's cache
counters, the entry files in the directory, the outputs (so two runs can be compared) and the runtime's
namespace.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

GRAPHS = 3


def main(argv: list[str]) -> int:
    directory = argv[0]
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    from xla_cache.frameworks.namespace import namespace_id
    from xla_cache.frameworks.torch_xla import COUNTERS, FRAMEWORK, counter
    from xla_cache.localcache.cachedir import scan

    fingerprint = FRAMEWORK.fingerprint()
    xr.initialize_cache(directory, readonly=False)
    device = torch_xla.device()
    outputs = []
    for size in range(1, GRAPHS + 1):
        values = torch.arange(size * 4, dtype=torch.float32).reshape(size, 4).to(device)
        result = (values * 2.0 + 1.0).sum(dim=0)
        xm.mark_step()
        outputs.append(result.cpu().tolist())
    entries = sorted(scan(Path(directory)))
    print(
        json.dumps(
            {
                "torch_xla_version": torch_xla.__version__,
                "graphs": GRAPHS,
                "counters": {name: counter(name) for name in COUNTERS},
                "entries": entries,
                "outputs": outputs,
                "namespace": namespace_id(fingerprint),
                "fingerprint": fingerprint,
                "pid": os.getpid(),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
