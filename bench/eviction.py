"""Benchmark: evicting 100,000 entries, and what /metrics and /admin/stats cost on an index that size.

Prints figures measured in one run on this machine (no pass/fail). Setup (writing the blobs and rows) is
not measured; blobs are written by the real local store with fsync skipped, to set up faster.

    .venv/bin/python bench/eviction.py [--entries 100000] [--size 256] [--database-url postgresql://...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.scratch import scratch_arguments, scratch_services
from cache_server.index.entries import EntryRecord, EntryRepository
from cache_server.metrics import StoredCollector, render
from cache_server.storage.base import blob_name
from cache_server.wiring import Services

NAMESPACES = 8


def populate(services: Services, entries: int, size: int) -> None:
    store = services.store
    data = b"x" * size
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)
    records = []
    with mock.patch("os.fsync"):  # setup only: the blobs are real files in the real layout
        for i in range(entries):
            namespace, key = f"ns{i % NAMESPACES}", f"{i:012d}"
            store.put(blob_name(namespace, key), [data], {"sha256": "0" * 64})
            records.append(
                EntryRecord(namespace, key, size, "0" * 64, created_at=start + dt.timedelta(milliseconds=i))
            )
    EntryRepository(services.database).add_missing_entries(records)  # the index, loaded in bulk


def timed(label: str, work: object, repeat: int = 1) -> object:
    result = None
    start = time.perf_counter()
    for _ in range(repeat):
        result = work()  # type: ignore[operator]
    seconds = (time.perf_counter() - start) / repeat
    print(f"{label:<52} {seconds * 1000:10.1f} ms")
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    scratch_arguments(parser)
    parser.add_argument("--size", type=int, default=256, help="bytes per entry")
    args = parser.parse_args()
    with scratch_services(args.database_url) as services:
        admin = services.admin
        start = time.perf_counter()
        populate(services, args.entries, args.size)
        print(
            f"setup: {args.entries} entries of {args.size} B in {NAMESPACES} namespaces "
            f"({time.perf_counter() - start:.1f} s, not part of the figures)"
        )
        collector = StoredCollector(admin.stored_by_namespace)
        timed("GET /metrics body (stored gauges read from the index)", lambda: render(collector), repeat=5)
        timed("GET /admin/stats report", lambda: admin.stats(), repeat=5)
        dry = timed(
            "evict dry run, everything (lists 1000)",
            lambda: services.evictor.evict(max_total_bytes=0, dry_run=True),
        )
        assert dry.evicted == args.entries  # type: ignore[attr-defined]
        start = time.perf_counter()
        result = services.evictor.evict(max_total_bytes=0)
        seconds = time.perf_counter() - start
        assert result.evicted == args.entries, result.evicted
        left_rows = sum(n for n, _ in admin.stored_by_namespace().values())
        left_blobs = sum(1 for _ in services.store.list())
        assert left_rows == 0 and left_blobs == 0, (left_rows, left_blobs)
        label = f"evict {args.entries} entries (rows, then blobs)"
        print(f"{label:<52} {seconds * 1000:10.1f} ms   = {args.entries / seconds:,.0f} entries/s")
        print(
            f"after: {left_rows} rows, {left_blobs} blobs left; evictions counted: "
            f"{admin.stats().totals.counters.evictions}"
        )


if __name__ == "__main__":
    main()
