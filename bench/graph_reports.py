"""``python -m bench.graph_reports``: what the bucketing report costs the server for the fourth probe's graphs
(issue 42, item 2): 250 entries of ~500 bytes uploaded (``tests.support.crafted_entries.sliced``: a thousand
slices whose limits differ per entry, one structure, 64 KiB of sized ops text each in the index), then
``--graphs`` more such graphs of 34 entries each.

For ``GET /admin/graphs?namespace=probe`` (the probe's graph alone) and ``top=100`` (all of them), on a real
``xla-cache-server serve`` (SQLite index, one process): the server process's CPU seconds, the wall seconds,
the answer's bytes (medians of ``--reps``) and the process's peak resident memory over what it held before
(``VmHWM`` reset first; the largest of the repetitions); with how many bodies each graph compared of how
many are stored. Then ``--burst`` reports asked at once: how many were served and how many answered 503
(the server's slots).

    .venv/bin/python -m bench.graph_reports [--graphs 3] [--reps 3] [--burst 8]   # about 2 minutes
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.launch import peak_rss_bytes, process_cpu, reset_peak_rss, run_server
from cache_protocol import SHA256_HEADER
from tests.support.api import sha
from tests.support.crafted_entries import sliced
from tests.support.process_tree import rss_bytes
from tests.support.wait import wait_until

PROBE_ENTRIES, MORE_ENTRIES = 250, 34


def _upload(api: httpx.Client, module: str, entries: int) -> None:
    """``entries`` probe entries of graph ``module``, then wait until the server has parsed them all."""
    for n in range(entries):
        data = sliced(n, module=module.encode())
        answer = api.put(
            f"/v1/namespaces/probe/entries/{module}-{n:04d}", content=data, headers={SHA256_HEADER: sha(data)}
        )
        answer.raise_for_status()

    def parsed() -> bool:
        graphs = api.get("/admin/stats", params={"top": 100}).json()["top_graphs"]
        return any(g["module"] == module and g["entries"] == entries for g in graphs)

    wait_until(parsed, timeout=600, interval=0.5, message=f"{module} was never parsed")


def _measure(api: httpx.Client, pid: int, params: dict[str, Any], reps: int) -> None:
    cpus, walls, peaks = [], [], []
    body: dict[str, Any] = {}
    size = 0
    for _ in range(reps):
        reset_peak_rss(pid)
        resident, cpu, start = rss_bytes([pid]), process_cpu(pid), time.perf_counter()
        answer = api.get("/admin/graphs", params={"namespace": "probe", **params})
        walls.append(time.perf_counter() - start)
        cpus.append(process_cpu(pid) - cpu)
        peaks.append(((peak_rss_bytes(pid) or resident) - resident) / 2**20)
        answer.raise_for_status()
        body, size = answer.json(), len(answer.content)
    compared = ", ".join(f"{g['bodies_read']}/{g['bodies_stored']}" for g in body["graphs"])
    cpu, wall = statistics.median(cpus), statistics.median(walls)
    peak = max(peaks)  # the first repetition's: later ones reuse the memory it left to the allocator
    print(
        f"  {params!s:14s} server cpu {cpu:5.2f} s  wall {wall:5.2f} s  answer {size:,} bytes  "
        f"peak +{peak:.0f} MiB  (bodies compared/stored: {compared})"
    )


def _burst(url: str, count: int) -> None:
    def ask(_: int) -> int:
        with httpx.Client(base_url=url, timeout=120) as api:
            return api.get("/admin/graphs", params={"namespace": "probe", "top": 100}).status_code

    start = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        statuses = list(pool.map(ask, range(count)))
    print(
        f"  {count} reports at once: {statuses.count(200)} served, {statuses.count(503)} answered 503 "
        f"in {time.perf_counter() - start:.1f} s"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=3, help="more graphs beside the probe's")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--burst", type=int, default=8)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, run_server(Path(tmp)) as server:
        pid = server.process.pid
        with httpx.Client(base_url=server.url, timeout=600) as api:
            _upload(api, "crafted", PROBE_ENTRIES)
            print(
                f"bucketing report of the probe's graphs (SQLite, one server process), median of {args.reps}:"
            )
            _measure(api, pid, {}, args.reps)
            for n in range(args.graphs):
                _upload(api, f"crafted-{n}", MORE_ENTRIES)
            _measure(api, pid, {"top": 100}, args.reps)
        _burst(server.url, args.burst)


if __name__ == "__main__":
    main()
