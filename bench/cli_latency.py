"""How long the ``xla-cache`` commands that only ask the server take, as a user runs them (a new process
each: interpreter start, imports, one or two requests), beside the floor of starting Python at all and the
cost of fingerprinting the runtime live (``stats --runtime``, which imports torch_xla).

    .venv/bin/python -m bench.cli_latency            # 5 repetitions each, medians
    .venv/bin/python -m bench.cli_latency --reps 9

A real server on loopback with a fresh data directory; the namespace comes from a warm with a given
fingerprint (``initialize=False``: no framework imported), as the last warm on a host records it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.server import run_server

CLIENT = Path(sys.executable).with_name("xla-cache")
FINGERPRINT = {"schema": 1, "framework": "torch_xla", "torch_xla_version": "2.7.0", "device_type": "CPU"}


def timed(argv: list[str], env: dict[str, str], *, check: bool = True) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=check, capture_output=True, timeout=300)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="xla-cache-cli-bench-") as temp,
        run_server(Path(temp) / "server") as server,
    ):
        cache = Path(temp) / "cache"
        env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
        env.update(XLA_CACHE_SERVER=server.url, XLA_CACHE_DIR=str(cache), XLA_CACHE_CONFIG="")
        env["PJRT_DEVICE"] = "CPU"
        from xla_cache import warm

        warm(server.url, cache, initialize=False, upload=False, fingerprint=FINGERPRINT)
        rows = {
            "python -c pass (floor)": [sys.executable, "-c", "pass"],
            "xla-cache config": [str(CLIENT), "config"],
            "xla-cache stats": [str(CLIENT), "stats"],
            "xla-cache runs": [str(CLIENT), "runs"],
            "xla-cache graphs": [str(CLIENT), "graphs"],
        }
        floor = 0.0
        print(f"{'command':<32} {'median s':>9} {'min s':>7} {'max s':>7} {'x floor':>8}")
        for name, argv in rows.items():
            timed(argv, env)  # bytecode written, page cache warm
            series = [timed(argv, env) for _ in range(args.reps)]
            median = statistics.median(series)
            floor = floor or median
            print(f"{name:<32} {median:9.3f} {min(series):7.3f} {max(series):7.3f} {median / floor:8.1f}")
        # Its namespace is not on this server (exit 2): the time is the fingerprint's, and the one request.
        runtime = timed([str(CLIENT), "stats", "--runtime", "--framework", "torch_xla"], env, check=False)
        print(
            f"{'xla-cache stats --runtime (once)':<32} {runtime:9.3f} {'':>7} {'':>7} {runtime / floor:8.1f}"
        )


if __name__ == "__main__":
    main()
