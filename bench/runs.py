"""Benchmark: GET /admin/runs and GET /admin/runs/{id} on an index of 100,000 runs and 1,000,000 entries.

Prints figures measured in one run on this machine (no pass/fail; issue 27 asks for under 250 ms). The index
is PostgreSQL (a fresh database, dropped at the end); setup fills it with SQL in bulk and is not measured:
1,000,000 entries with their parsed graphs in 100 namespaces (one of them, ``seed``, holds one module at
3,000 shapes), 100,000 runs over 30 days (300 hosts, three frameworks) with 5 misses each, and one run that
compiled 1,000 shapes of the seed's module. Requests go through the real app in process (TestClient).

    .venv/bin/python bench/runs.py [--runs 100000] [--entries 1000000] [--admin-url postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cache_server.app import create_app
from cache_server.index.migrate import upgrade
from cache_server.settings import Settings

NAMESPACES = 100
SEED_VARIANTS = 3_000
HEAVY_MISSES = 1_000

FILL = """
INSERT INTO namespaces (name, fingerprint, labels, created_at, last_used_at, hits, misses, uploads,
    bytes_served, evictions, bytes_uploaded, compile_ms_saved, live_deliveries, live_compile_ms_saved)
SELECT 'ns' || n, '{}', '{}', now(), now(), 1000, 10, 0, 0, 0, 0, 2000000, 0, 0
FROM generate_series(1, :ns) n;
INSERT INTO namespaces (name, fingerprint, labels, created_at, last_used_at, hits, misses, uploads,
    bytes_served, evictions, bytes_uploaded, compile_ms_saved, live_deliveries, live_compile_ms_saved)
VALUES ('seed', '{}', '{}', now(), now(), 0, 0, 0, 0, 0, 0, 0, 0, 0);
INSERT INTO entries (namespace, key, size, sha256, created_at, last_access_at, hits, compile_time_ms)
SELECT 'ns' || (1 + i % :ns), lpad(i::text, 12, '0'), 4096, repeat('0', 64),
       now() - interval '40 days', now() - interval '40 days', 0, 2000
FROM generate_series(1, :entries - :seed) i;
INSERT INTO entries (namespace, key, size, sha256, created_at, last_access_at, hits, compile_time_ms)
SELECT 'seed', 'seed-' || i, 4096, repeat('0', 64), now() - interval '40 days',
       now() - interval '40 days', 0, 2000
FROM generate_series(1, :seed) i;
INSERT INTO entry_graphs (namespace, key, module, signature, shapes, source, parsed_at)
SELECT namespace, key, 'SyncTensorsGraph.' || (abs(hashtext(key)) % 50),
       substr(md5(key), 1, 16), '(f32[16,3], f32[' || (abs(hashtext(key)) % 64 + 1) || ',16]) -> (f32[3])',
       NULL, now()
FROM entries WHERE namespace <> 'seed';
INSERT INTO entry_graphs (namespace, key, module, signature, shapes, source, parsed_at)
SELECT 'seed', 'seed-' || i, 'SyncTensorsGraph.15', substr(md5(i::text), 1, 16),
       '(f32[16,3], f32[' || i || ',16], f32[' || (i % 77 + 1) || ',8]) -> (f32[3])', NULL, now()
FROM generate_series(1, :seed) i;
INSERT INTO runs (run_id, namespace, framework, host, process_index, reported_by, started_at, updated_at,
    ended_at, warm_ms, warm_bytes, warm_entries, hits, misses, compile_ms, saved_ms, uploaded_entries,
    live_entries, load_failures)
SELECT md5(r::text), 'ns' || (1 + r % :ns), (ARRAY['torch_xla','jax','torchax'])[1 + r % 3],
       'host-' || (r % 300), r % 8, NULL, now() - (r * interval '26 seconds'),
       now() - (r * interval '26 seconds') + interval '1 hour',
       now() - (r * interval '26 seconds') + interval '1 hour', 1800, 1048576, 2000, 1990, 10, 31500,
       20000000, 10, 0, 0
FROM generate_series(1, :runs) r;
INSERT INTO run_misses (run_id, key, namespace, module, components, compile_ms, load_failed, reported_at)
SELECT md5(r::text), 'miss-' || r || '-' || m, 'ns' || (1 + r % :ns), 'SyncTensorsGraph.' || m, NULL,
       2100, false,
       now() - (r * interval '26 seconds') + m * interval '1 second'
FROM generate_series(1, :runs) r, generate_series(1, 5) m;
INSERT INTO runs (run_id, namespace, framework, host, process_index, reported_by, started_at, updated_at,
    ended_at, warm_ms, warm_bytes, warm_entries, hits, misses, compile_ms, saved_ms, uploaded_entries,
    live_entries, load_failures)
VALUES ('heavy-run-0001', 'seed', 'torch_xla', 'seed-host', 0, NULL, now(), now(), now(), 0, 0, 0, 0,
    :heavy, 2100000, 0, :heavy, 0, 0);
INSERT INTO run_misses (run_id, key, namespace, module, components, compile_ms, load_failed, reported_at)
SELECT 'heavy-run-0001', 'seed-' || (:seed - :heavy + i), 'seed', NULL, NULL, 2100, false,
       now() + i * interval '1 microsecond'
FROM generate_series(1, :heavy) i;
ANALYZE;
"""


def measure(client: TestClient, label: str, path: str, reps: int = 20) -> float:
    client.get(path)  # a first request warms caches; the figure is the median of the next ones
    seconds = []
    for _ in range(reps):
        start = time.perf_counter()
        response = client.get(path)
        seconds.append(time.perf_counter() - start)
        assert response.status_code == 200, response.text
    median = statistics.median(seconds) * 1000
    print(f"{label:<58} median {median:7.1f} ms   max {max(seconds) * 1000:7.1f} ms")
    return median


def measure_all(client: TestClient, name: str) -> None:
    """Every figure, through ``client``."""
    print(f"index: PostgreSQL ({name}), through the app in process")
    measure(client, "GET /admin/runs (latest 100)", "/admin/runs")
    measure(client, "GET /admin/runs?limit=1000", "/admin/runs?limit=1000")
    measure(client, "GET /admin/runs?namespace=ns7", "/admin/runs?namespace=ns7")
    measure(client, "GET /admin/runs?host=host-42", "/admin/runs?host=host-42")
    measure(
        client,
        "GET /admin/runs?framework=jax&host=host-3",
        "/admin/runs?framework=jax&host=host-3",
    )
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 20 * 86400))
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 19 * 86400))
    measure(
        client,
        "GET /admin/runs?since=-20d&until=-19d",
        f"/admin/runs?since={since}&until={until}",
    )
    measure(client, "GET /admin/runs?host=no-such-host (scans every run)", "/admin/runs?host=nowhere")
    run_id = client.get("/admin/runs?namespace=ns3&limit=1").json()["runs"][0]["run_id"]
    measure(client, "GET /admin/runs/{id} (5 misses, 10,000-entry namespace)", f"/admin/runs/{run_id}")
    measure(
        client,
        f"GET /admin/runs/{{id}} (100 of {HEAVY_MISSES:,} misses, {SEED_VARIANTS:,} shapes)",
        "/admin/runs/heavy-run-0001",
    )
    measure(
        client,
        f"GET /admin/runs/{{id}}?limit=1000 (all {HEAVY_MISSES:,} misses listed)",
        "/admin/runs/heavy-run-0001?limit=1000",
        reps=5,
    )
    heavy = client.get("/admin/runs/heavy-run-0001?limit=1000").json()
    reasons = {m["reason"] for m in heavy["misses"]}
    print(f"heavy run: {len(heavy['misses'])} misses listed, reasons {sorted(reasons)}")


def timed_setup(label: str, work: Callable[[], None]) -> None:
    start = time.perf_counter()
    work()
    print(f"setup: {label} ({time.perf_counter() - start:.1f} s, not part of the figures)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--existing", default="", help="measure an index filled before (skip the setup)")
    args = parser.parse_args()
    if args.existing:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(data_dir=Path(tmp), database_url=args.existing, gc_interval_seconds=0)
            with TestClient(create_app(settings)) as client:
                measure_all(client, args.existing.rsplit("/", 1)[-1])
        return
    name = f"xla_cache_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"{args.admin_url.rsplit('/', 1)[0]}/{name}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(data_dir=Path(tmp), database_url=url, gc_interval_seconds=0)
            upgrade(settings)
            engine = create_engine(url)

            def fill() -> None:
                params = {
                    "ns": NAMESPACES,
                    "entries": args.entries,
                    "seed": SEED_VARIANTS,
                    "runs": args.runs,
                    "heavy": HEAVY_MISSES,
                }
                with engine.begin() as conn:
                    for statement in filter(str.strip, FILL.split(";\n")):
                        conn.execute(text(statement), params)

            timed_setup(
                f"{args.entries:,} entries with graphs, {args.runs:,} runs with {5 * args.runs:,} misses",
                fill,
            )
            engine.dispose()
            with TestClient(create_app(settings)) as client:
                measure_all(client, name)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
