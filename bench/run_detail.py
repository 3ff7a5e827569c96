"""What a run's detail costs for a run of 10,000 reported misses (issue 36): ``GET /admin/runs/{id}`` on a
real ``xla-cache-server serve`` (SQLite index, its own process), the first page at limit 100 and 1,000 and a
later page (offset 5,000), each timed as wall seconds and the server's CPU seconds (its process's
``/proc`` times), median of ``--reps``. The run is ten reports of 1,000 JAX-like misses (module name and
the key components), in a namespace holding no entries, as the probe sent it.

    .venv/bin/python -m bench.run_detail [--misses 10000] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench.launch import run_server
from cache_protocol.runs import COMPONENT_NAMES, MAX_MISSES_PER_REPORT


def _cpu(pid: int) -> float:
    """The process's user and system CPU seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _report(run_id: str, first: int, count: int) -> dict[str, object]:
    misses = [
        {
            "key": f"jit_step_{i:06d}-{'0' * 40}",
            "module": f"jit_step_{i % 50}",
            "components": {name: f"{i:064x}" for name in COMPONENT_NAMES},
            "compile_seconds": 1.5,
        }
        for i in range(first, first + count)
    ]
    return {
        "run_id": run_id,
        "namespace": "bench-detail",
        "framework": "jax",
        "host": "bench",
        "process_index": 0,
        "started_at": time.time() - 3600,
        "misses": first + count,
        "compile_seconds": 1.5 * (first + count),
        "new_misses": misses,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, run_server(Path(tmp)) as server:
        pid = server.process.pid
        with httpx.Client(base_url=server.url, timeout=600) as api:
            for first in range(0, args.misses, MAX_MISSES_PER_REPORT):
                count = min(MAX_MISSES_PER_REPORT, args.misses - first)
                answer = api.post("/v1/runs", json=_report("bench-detail-run", first, count))
                answer.raise_for_status()
            print(f"run detail, {args.misses} misses (SQLite, one server process), median of {args.reps}:")
            for label, query in (
                ("first page, limit 100", {"limit": 100}),
                ("first page, limit 1000", {"limit": 1000}),
                ("offset 5000, limit 100", {"limit": 100, "offset": 5000}),
            ):
                walls, cpus = [], []
                for _ in range(args.reps):
                    cpu, start = _cpu(pid), time.perf_counter()
                    answer = api.get("/admin/runs/bench-detail-run", params=query)
                    walls.append(time.perf_counter() - start)
                    cpus.append(_cpu(pid) - cpu)
                    assert answer.status_code == 200, answer.text
                    body = answer.json()
                print(
                    f"  {label:24s} wall {statistics.median(walls):6.3f} s  server cpu "
                    f"{statistics.median(cpus):6.3f} s  ({len(body['misses'])} listed, "
                    f"{body['reasons_counted']} counted, {body['misses_stored']} stored)"
                )


if __name__ == "__main__":
    main()
