"""A prefill of 1,000 shapes of a small step on this host (issue 44, item 4): its time, the peak resident
memory of a worker and of the prefill's own process, then the same prefill again (everything stored:
nothing compiled nor uploaded). BENCHMARKS.md, "Prefill".

    python -m bench.prefill [--shapes 1000] [--workers 2] [--json figures.json]

The step is ``tests.prefill.steps:step`` (``tanh(x @ x.T).sum(0) * 2 + 1`` at 1..N rows of 8) compiled
for this host's CPU; the server is a real ``xla-cache-server serve`` on loopback with a fresh data
directory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project root, for tests and bench

from bench.launch import run_server
from tests.prefill.steps import calls


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    from xla_cache.prefill import prefill

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    figures: dict[str, object] = {"shapes": args.shapes, "workers": args.workers, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as data, run_server(Path(data)) as server:
        wanted = calls(range(1, args.shapes + 1))
        for run in ("first", "again"):
            load = os.getloadavg()[0]
            started = time.perf_counter()
            summary = prefill(
                "tests.prefill.steps:step", wanted, server=server.url, workers=args.workers, unverified=True
            )
            seconds = time.perf_counter() - started
            figures[run] = {
                "seconds": round(seconds, 1),
                "compiled": summary.compiled,
                "stored": summary.stored,
                "failed": len(summary.failed),
                "uploaded": summary.uploaded,
                "uploaded_bytes": summary.uploaded_bytes,
                "workers_started": summary.workers_started,
                "peak_worker_mib": summary.peak_worker_mib,
                "load_average_before": round(load, 1),
            }
            print(f"{run}: " + "\n  ".join(summary.lines()), flush=True)
    figures["peak_prefill_process_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    figures["peak_child_mib"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
