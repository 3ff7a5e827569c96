"""What the fourth probe's run detail costs (issue 42, item 1): one graph stored at ``--entries`` baked sizes
(each an entry of ``--ops`` slices whose limits all differ: an ops text of about 64 KiB at 1,000 ops), parsed,
and one run that compiled each of them; then ``GET /admin/runs/{id}`` at ``limit=0`` and ``limit=100`` on a
real ``xla-cache-server serve`` (SQLite index, its own process): the server's CPU seconds, the answer's
bytes and how much the server's resident memory grew at its peak; and the worst ``/healthz`` while eight
such pages are asked for at once.

    .venv/bin/python -m bench.run_detail_probe [--entries 60] [--ops 1000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.launch import run_server
from tests.support.api import put_ok
from tests.support.crafted_entries import sliced
from tests.support.process_tree import cpu_seconds, peak_rss_mib, reset_peak_rss, rss_bytes

RUN = "bench-probe-run-0001"


def _fill(url: str, entries: int, ops: int) -> None:
    keys = [f"sliced-{salt:05d}" for salt in range(entries)]
    with httpx.Client(base_url=url, timeout=120) as api:
        for salt, key in enumerate(keys):
            put_ok(api, "probe", key, sliced(salt, ops=ops))
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            graphs = api.get("/admin/stats", params={"top": 5}).json()["top_graphs"]
            if sum(g["entries"] for g in graphs) >= entries:
                break
            time.sleep(0.5)
        report = {
            "run_id": RUN,
            "namespace": "probe",
            "framework": "torch_xla",
            "host": "bench",
            "process_index": 0,
            "started_at": time.time() - 60,
            "misses": entries,
            "new_misses": [{"key": key, "module": "crafted", "compile_seconds": 2.0} for key in keys],
        }
        api.post("/v1/runs", json=report).raise_for_status()


def _measure(url: str, pid: int, limit: int) -> tuple[float, int, float, float]:
    """Server CPU seconds, answer bytes, peak RSS growth (MiB) and wall seconds of one detail page."""
    exact = reset_peak_rss(pid)
    rss, cpu, start = rss_bytes([pid]) / 2**20, cpu_seconds(pid), time.perf_counter()
    answer = httpx.get(f"{url}/admin/runs/{RUN}", params={"limit": limit}, timeout=600)
    wall = time.perf_counter() - start
    answer.raise_for_status()
    grown = (peak_rss_mib(pid) if exact else rss_bytes([pid]) / 2**20) - rss
    return cpu_seconds(pid) - cpu, len(answer.content), grown, wall


def _healthz(url: str, times: int = 40) -> float:
    """The worst ``/healthz`` wall time of ``times``, a tenth of a second apart."""
    worst = 0.0
    with httpx.Client(base_url=url, timeout=60) as api:
        for _ in range(times):
            start = time.perf_counter()
            api.get("/healthz").raise_for_status()
            worst = max(worst, time.perf_counter() - start)
            time.sleep(0.1)
    return worst


def _healthz_under_load(url: str) -> float:
    """The worst ``/healthz`` wall time while eight detail pages (limit 100) are asked for at once."""
    stop = threading.Event()

    def ask() -> None:
        with httpx.Client(base_url=url, timeout=600) as api:
            while not stop.is_set():
                api.get(f"/admin/runs/{RUN}", params={"limit": 100})

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        return _healthz(url)
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=60)
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, run_server(Path(tmp)) as server:
        pid = server.process.pid
        _fill(server.url, args.entries, args.ops)
        print(f"run detail of the probe's graph: {args.entries} entries of {args.ops} sized ops (SQLite):")
        for limit in (0, 100):
            runs = [_measure(server.url, pid, limit) for _ in range(args.reps)]
            cpu, size, grown, wall = (statistics.median(values) for values in zip(*runs, strict=True))
            print(
                f"  limit={limit:<4} server cpu {cpu:6.2f} s  wall {wall:6.2f} s  answer "
                f"{size / 1e6:7.3f} MB  peak RSS +{grown:5.1f} MiB  (median of {args.reps})"
            )
        idle, loaded = _healthz(server.url), _healthz_under_load(server.url)
        print(
            f"  /healthz worst of 40: {idle * 1000:.0f} ms idle, "
            f"{loaded * 1000:.0f} ms while 8 pages are asked"
        )


if __name__ == "__main__":
    main()
