"""What a run report costs: the job (client CPU and bytes of one report, requests per run) and the server
(rows, bytes and time per run in the index), measured in one run (``python -m bench.run_reports``).

Client: a :class:`~xla_cache.runs.RunReporter` over a cache directory of 2,000 warmed entries posts to a real
``xla-cache-server serve`` (its own process, so the client's thread CPU is the reporter's alone); each
report is timed (thread CPU and wall) with 0, 100 and 1,000 new compiles in the directory, JAX-like (module
name and the eight key components of :data:`~cache_protocol.runs.COMPONENT_NAMES`) and torch_xla-like (a
bare key). The collector is a stand-in that knows each miss's facts already: reading JAX's DEBUG lines is
the job's cost, not the report's (see BENCHMARKS.md for what it costs JAX).

Server: ``--runs`` runs of 0, 10 and 100 JAX-like misses each go through the real ``POST /v1/runs`` (the
app in process) into a fresh PostgreSQL database and a SQLite file; the tables' growth (PostgreSQL:
``pg_total_relation_size`` of ``runs`` and ``run_misses`` with their indexes; SQLite: the file after a WAL
checkpoint) per run and per miss, and the median time of one report.

    .venv/bin/python -m bench.run_reports [--runs 2000] [--reps 7] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from bench.launch import run_server
from cache_protocol.runs import COMPONENT_NAMES, MAX_MISSES_PER_REPORT, REPORT_INTERVAL_SECONDS
from cache_server.app import create_app
from cache_server.settings import Settings
from tests.support.clock import ManualMonotonic
from tests.support.databases import fresh_database_url
from xla_cache.frameworks import all_frameworks
from xla_cache.http.api import CacheApi
from xla_cache.localcache.cachedir import LocalFile, scan
from xla_cache.runs import CompileCounts, MissFacts, RunCollector, RunReporter, Transfers, WarmFacts

WARMED = 2_000
CLIENT_MISSES = (0, 100, 1_000)
SERVER_MISSES = (0, 10, 100)
ENTRY_BYTES = b"x" * 4096


def jax_key(n: int, module: str = "jit_train_step") -> str:
    return f"{module}-{n:064x}-cache"


def torch_key(n: int) -> str:
    return str(10**38 + n)


def components(n: int) -> dict[str, str]:
    """JAX's eight key components of one miss, as the client reports them (64 hex digits each)."""
    return {name: f"{n * 8 + i:064x}" for i, name in enumerate(COMPONENT_NAMES)}


class KnownFacts(RunCollector):
    """A JAX-like collector that knows each miss's module and components (``rich``), or a torch_xla-like
    one that knows nothing of a key."""

    def __init__(self, rich: bool) -> None:
        self.rich = rich

    def framework(self) -> str:
        return "jax" if self.rich else "torch_xla"

    def counts(self) -> CompileCounts:
        return CompileCounts(hits=1990, misses=10, compile_seconds=31.5)

    def facts(self, files: Sequence[LocalFile]) -> dict[str, MissFacts]:
        if not self.rich:
            return {}
        return {
            f.key: MissFacts(module="jit_train_step", components=components(i), compile_seconds=2.1)
            for i, f in enumerate(files)
        }


class CountingTransport(httpx.HTTPTransport):
    """Counts the requests and the bytes of their bodies."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(len(request.read()))
        return super().handle_request(request)


def one_report(
    directory: Path, url: str, *, rich: bool, misses: int, serial: int
) -> tuple[float, float, int, float]:
    """A fresh run over ``directory``: its first report with ``misses`` new entry files; (thread CPU
    seconds, wall seconds, body bytes, thread CPU seconds of the next report: nothing new, the connection
    kept)."""
    key = jax_key if rich else torch_key
    transport = CountingTransport()
    api = CacheApi(url, transport=transport)
    clock = ManualMonotonic()
    reporter = RunReporter(
        api=api,
        namespace="cpu-bench",
        directory=directory,
        adapter=all_frameworks()["jax" if rich else "torch_xla"],
        collector=KnownFacts(rich),
        transfers=Transfers,
        baseline=scan(directory),
        interval=REPORT_INTERVAL_SECONDS,
        clock=clock,
    )
    reporter.begin(WarmFacts(started_at=time.time(), seconds=1.8, bytes=WARMED * 4096, entries=WARMED))
    new = [directory / key(1_000_000 + serial * 10_000 + i) for i in range(misses)]
    for path in new:
        path.write_bytes(ENTRY_BYTES)
    try:
        cpu, wall = time.thread_time(), time.perf_counter()
        reporter.tick()
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        sent = reporter.current()
        assert sent["reports_sent"] == 1 and sent["unreported_misses"] == 0, sent
        assert len(sent["missed_keys"]) == misses, len(sent["missed_keys"])
        clock.advance(REPORT_INTERVAL_SECONDS)
        later = time.thread_time()
        reporter.tick()
        later = time.thread_time() - later
        assert reporter.current()["reports_sent"] == 2
        return cpu, wall, transport.bodies[0], later
    finally:
        api.close()
        for path in new:
            path.unlink()


def client_figures(scratch: Path, reps: int) -> None:
    print(
        f"client: one report (the reporter's tick), a directory of {WARMED:,} warmed entries, "
        f"a real server in its own process; median of {reps}"
    )
    with run_server(scratch / "server") as server:
        for rich, label in ((True, "JAX-like"), (False, "torch_xla-like")):
            directory = scratch / label
            directory.mkdir(parents=True)
            key = jax_key if rich else torch_key
            for i in range(WARMED):
                (directory / key(i)).write_bytes(ENTRY_BYTES)
            alone = []
            for _ in range(reps):
                started = time.thread_time()
                scan(directory, all_frameworks()["jax" if rich else "torch_xla"].is_entry)
                alone.append(time.thread_time() - started)
            print(
                f"  {label:<15} the look for new files alone ({WARMED:,} entries): CPU "
                f"{statistics.median(alone) * 1e3:5.2f} ms"
            )
            zero_cpu = 0.0
            zero_bytes = 0
            for misses in CLIENT_MISSES:
                one_report(directory, server.url, rich=rich, misses=misses, serial=0)  # warms imports
                runs = [
                    one_report(directory, server.url, rich=rich, misses=misses, serial=rep + 1)
                    for rep in range(reps)
                ]
                cpu = statistics.median(r[0] for r in runs) * 1e3
                wall = statistics.median(r[1] for r in runs) * 1e3
                size = runs[0][2]
                later = statistics.median(r[3] for r in runs) * 1e3
                if misses == 0:
                    zero_cpu, zero_bytes = cpu, size
                    extra = ""
                else:
                    extra = (
                        f"   per miss {(cpu - zero_cpu) * 1e3 / misses:6.1f} us CPU, "
                        f"{(size - zero_bytes) / misses:5.0f} B"
                    )
                print(
                    f"  {label:<15} {misses:>5,} new misses: CPU {cpu:7.2f} ms   wall {wall:7.2f} ms   "
                    f"body {size:>9,} B   next report CPU {later:5.2f} ms{extra}"
                )
    for hours in (1, 24):
        periodic = int(hours * 3600 // REPORT_INTERVAL_SECONDS)
        print(
            f"  requests of a {hours:>2}-hour run at the default interval ({REPORT_INTERVAL_SECONDS:.0f} s): "
            f"1 after the warm + {periodic} periodic + 1 at exit = {periodic + 2} "
            f"(a report carries at most {MAX_MISSES_PER_REPORT:,} misses: the exit sends one more per "
            f"{MAX_MISSES_PER_REPORT:,} still unreported)"
        )


def server_body(run_id: str, misses: int, start: int) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "namespace": "cpu-jax0.10.2-bench",
        "framework": "jax",
        "host": "tpu-vm-17",
        "process_index": 0,
        "started_at": time.time() - 3600,
        "ended_at": time.time(),
        "warm_seconds": 1.8,
        "warm_bytes": 8_192_000,
        "warm_entries": WARMED,
        "hits": 1990,
        "misses": misses,
        "compile_seconds": 2.1 * misses,
        "uploaded_entries": misses,
        "live_entries": 0,
        "load_failures": 0,
        "new_misses": [
            {
                "key": jax_key(start + i),
                "module": "jit_train_step",
                "components": components(start + i),
                "compile_seconds": 2.1,
                "load_failed": False,
            }
            for i in range(misses)
        ],
    }


def server_figures(scratch: Path, runs: int) -> None:
    print(f"server: {runs:,} runs per size through POST /v1/runs (app in process), JAX-like misses")
    for kind in ("postgresql", "sqlite"):
        tmp = scratch / kind
        tmp.mkdir()
        with fresh_database_url(kind, tmp, at_head=True) as url:
            settings = Settings(
                data_dir=tmp / "data", database_url=url, gc_interval_seconds=0, log_level="warning"
            )
            size = table_bytes(kind, url)
            with TestClient(create_app(settings)) as client:
                serial = 0
                bare = 0.0
                for misses in SERVER_MISSES:
                    before, runs_before, misses_before = size()
                    seconds = []
                    for _ in range(runs):
                        body = server_body(uuid.uuid4().hex, misses, serial)
                        serial += misses
                        started = time.perf_counter()
                        response = client.post("/v1/runs", json=body)
                        seconds.append(time.perf_counter() - started)
                        assert response.status_code == 200, response.text
                    after, runs_after, misses_after = size()
                    per_run = (after - before) / runs
                    rows = (runs_after - runs_before + misses_after - misses_before) / runs
                    if misses == 0:
                        bare = per_run
                    per_miss = f"   per miss {(per_run - bare) / misses:5.0f} B" if misses else ""
                    print(
                        f"  {kind:<10} {misses:>3} misses/run: {rows:5.0f} rows, {per_run:8.0f} B per run"
                        f"{per_miss}   report median {statistics.median(seconds) * 1e3:6.1f} ms"
                    )


ROWS = "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM run_misses)"


def table_bytes(kind: str, url: str) -> Callable[[], tuple[int, int, int]]:
    """How to read the bytes the run tables take (PostgreSQL's relation sizes with indexes and TOAST, or
    the SQLite file after a WAL checkpoint) and their rows (runs, run_misses)."""
    if kind == "sqlite":
        path = url.removeprefix("sqlite:///")

        def sqlite_size() -> tuple[int, int, int]:
            conn = sqlite3.connect(path)
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                runs, misses = conn.execute(ROWS).fetchone()
            finally:
                conn.close()
            return os.path.getsize(path), int(runs), int(misses)

        return sqlite_size

    def postgres_size() -> tuple[int, int, int]:
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                query = "SELECT pg_total_relation_size('runs') + pg_total_relation_size('run_misses')"
                size = int(conn.execute(text(query)).scalar_one())
                runs, misses = conn.execute(text(ROWS)).one()
                return size, int(runs), int(misses)
        finally:
            engine.dispose()

    return postgres_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2_000, help="runs stored per size (server)")
    parser.add_argument("--reps", type=int, default=7, help="reports timed per size (client)")
    parser.add_argument("--quick", action="store_true", help="a tiny size: 20 runs, 2 reps")
    parser.add_argument("--only", choices=("client", "server"), default=None)
    args = parser.parse_args()
    if args.quick:
        args.runs, args.reps = 20, 2
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "client"):
            client_figures(Path(tmp) / "client", args.reps)
        if args.only in (None, "server"):
            server_figures(Path(tmp), args.runs)


if __name__ == "__main__":
    main()
