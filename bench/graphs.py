"""``python -m bench.graphs``: how long ``GET /admin/graphs`` takes with 1,000,000 entries in the index.

    python -m bench.graphs                               # PostgreSQL (the machine's, a throwaway database)
    python -m bench.graphs --database sqlite --entries 200000 --reps 5 --json graphs.json

The index holds ``--entries`` entries, each with its parsed graph (an ``entry_graphs`` row), in two layouts
at once: half in one namespace ``big`` (50 graphs of 10,000 shape variants each at 1,000,000 entries), the
other half over 99 namespaces (each: the seed workload's fuse graph at its 2,112 shapes, padded to seq 128,
and graphs of 100 variants for the rest). The request is timed through the app in process (routing, the
index's ranking read off ``graph_counts`` and one query per graph, parsing the shapes read, the analysis,
the JSON), with the defaults (10 graphs, at most 2,500 variants read of each and 4,000 in all) and with
``top=1``. Setup is not timed: rows are
inserted in bulk, as ``bench.cases.index`` does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.cases.index import _insert
from tests.support.databases import fresh_database_url

LIMIT_MS = 250.0
BIG_GRAPHS = 50
SMALL_VARIANTS = 100
SEQ_LEN, PATCHES = 128, 4


def seed_pairs() -> list[tuple[int, int]]:
    """The seed workload's (images, text tokens) pairs at seq 128: 2,112 shapes of one fuse graph."""
    return [
        (images, text)
        for images in range(SEQ_LEN // PATCHES)
        for text in range(1, SEQ_LEN - images * PATCHES + 1)
    ]


def fuse_shapes(images: int, text: int) -> str:
    rows = images * PATCHES
    return (
        f"(f32[32,32], f32[{rows},32], s64[{text}], s64[], f32[97,32]) -> "
        f"(f32[{rows},32], f32[{text},32], f32[{rows + text},32], f32[{SEQ_LEN},32])"
    )


def layout(entries: int) -> Iterator[tuple[str, str, str]]:
    """(namespace, module, shapes) of every entry: half in "big", half over 99 namespaces."""
    big = entries // 2
    per_graph = max(1, big // BIG_GRAPHS)
    for i in range(big):
        graph, variant = divmod(i, per_graph)
        yield (
            "big",
            f"SyncTensorsGraph.{100 + graph}",
            f"(f32[{variant + 1},64], s64[{variant % 97 + 1}]) -> (f32[1])",
        )
    pairs = seed_pairs()
    spread = entries - big
    per_namespace = spread // 99
    for n in range(99):
        count = per_namespace + (1 if n < spread % 99 else 0)
        for i in range(count):
            if i < len(pairs):
                yield f"ns{n:03d}", "SyncTensorsGraph.23", fuse_shapes(*pairs[i])
            else:
                graph, variant = divmod(i - len(pairs), SMALL_VARIANTS)
                yield f"ns{n:03d}", f"SyncTensorsGraph.{200 + graph}", f"(f32[{variant + 1},8]) -> (f32[1])"


def fill(database: Any, entries: int, postgresql: bool) -> None:
    """Every entry's row and its graph's row. On PostgreSQL with COPY (the triggers that keep entry_totals
    run once per COPY, a statement); on SQLite in multi-row inserts, as ``bench.cases.index`` does."""
    from sqlalchemy import insert

    from cache_server.index.entries import EntryRecord, EntryRepository
    from cache_server.index.models import EntryGraph

    repository = EntryRepository(database)
    now = dt.datetime.now(dt.timezone.utc)
    rows = [
        (namespace, f"{i:012d}", module, hashlib.sha256(shapes.encode()).hexdigest(), shapes)
        for i, (namespace, module, shapes) in enumerate(layout(entries))
    ]
    firsts = {row[0]: row for row in reversed(rows)}  # each namespace's first row registers it
    repository.add_missing_entries(
        [EntryRecord(ns, key, 1000, "0" * 64, created_at=now) for ns, key, *_ in firsts.values()]
    )
    rest = [row for row in rows if firsts[row[0]] is not row]
    if postgresql:
        raw = database.engine.raw_connection()
        try:
            with raw.cursor() as cursor:
                columns = "namespace, key, size, sha256, created_at, last_access_at, hits"
                with cursor.copy(f"COPY entries ({columns}) FROM STDIN") as copy:
                    for ns, key, *_ in rest:
                        copy.write_row((ns, key, 1000, "0" * 64, now, now, 0))
                with cursor.copy(
                    "COPY entry_graphs (namespace, key, module, signature, shapes, parsed_at) FROM STDIN"
                ) as copy:
                    for ns, key, module, signature, shapes in rows:
                        copy.write_row((ns, key, module, signature, shapes, now))
            raw.commit()
        finally:
            raw.close()
        raw = database.engine.raw_connection()
        try:  # as autovacuum leaves a table that is not written to: the index-only scans need no heap
            raw.driver_connection.autocommit = True
            with raw.cursor() as cursor:
                cursor.execute("VACUUM ANALYZE")
        finally:
            raw.close()
        return
    for start in range(0, len(rest), 50_000):
        part = rest[start : start + 50_000]
        _insert(
            database,
            repository,
            [EntryRecord(ns, key, 1000, "0" * 64, created_at=now) for ns, key, *_ in part],
        )
    for start in range(0, len(rows), 50_000):
        with database.transaction() as session:
            session.execute(
                insert(EntryGraph.__table__),
                [
                    {"namespace": ns, "key": key, "module": m, "signature": sig, "shapes": text}
                    for ns, key, m, sig, text in rows[start : start + 50_000]
                ],
            )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from cache_server.api.telemetry import ACCESS_LOGGER
    from cache_server.app import create_app
    from cache_server.graphs.report import DEFAULT_VARIANTS_READ, VARIANTS_READ_PER_REPORT, shares
    from cache_server.index.graph_variants import GraphVariantsRepository
    from cache_server.index.migrate import upgrade
    from cache_server.settings import Settings
    from tests.support.apps import services_of

    figures: dict[str, Any] = {"database": args.database, "entries": args.entries, "limit_ms": LIMIT_MS}
    with tempfile.TemporaryDirectory() as scratch, fresh_database_url(args.database, Path(scratch)) as url:
        settings = Settings(data_dir=Path(scratch) / "data", database_url=url, db_statement_timeout=900)
        upgrade(settings)
        client = TestClient(create_app(settings))  # its lifespan is not entered: no background work
        services = services_of(client)
        logging.getLogger(ACCESS_LOGGER).setLevel(logging.WARNING)  # no access log lines (set by create_app)
        started = time.perf_counter()
        fill(services.database, args.entries, args.database == "postgresql")
        figures["setup_s"] = round(time.perf_counter() - started, 1)
        print(f"{args.database}: {args.entries:,} entries with their graphs set up in {figures['setup_s']} s")
        variants = GraphVariantsRepository(services.database)
        cases: dict[str, dict[str, Any]] = {
            "big namespace (50% of entries, 50 graphs), top 10": {"namespace": "big"},
            "big namespace, top 1": {"namespace": "big", "top": 1},
            "seed-like namespace (1% of entries), top 10": {"namespace": "ns042"},
            "seed-like namespace, top 1": {"namespace": "ns042", "top": 1},
        }
        for label, params in cases.items():
            response = client.get("/admin/graphs", params=params)
            assert response.status_code == 200, response.text
            seconds = []
            for _ in range(args.reps):
                began = time.perf_counter()
                response = client.get("/admin/graphs", params=params)
                seconds.append(time.perf_counter() - began)
                assert response.status_code == 200
            body = response.json()
            first = body["graphs"][0]
            queries = []
            for _ in range(args.reps):
                began = time.perf_counter()
                ranked = variants.ranked(params["namespace"], top=int(params.get("top", 10)))
                reads = shares(
                    [g.variants for g in ranked],
                    per_graph=DEFAULT_VARIANTS_READ,
                    total=VARIANTS_READ_PER_REPORT,
                )
                variants.read_shapes(params["namespace"], ranked, reads)
                queries.append(time.perf_counter() - began)
            query_ms = statistics.median(queries) * 1000
            median = statistics.median(seconds) * 1000
            verdict = "met" if median < LIMIT_MS else "NOT MET"
            read = sum(g["read"] for g in body["graphs"])
            print(
                f"  {label}: median {median:.0f} ms (min {min(seconds) * 1000:.0f}, max "
                f"{max(seconds) * 1000:.0f}; {len(body['graphs'])} graphs, {read:,} variants read; first: "
                f"{first['module']} {first['variants']:,} variants; the index queries alone "
                f"{query_ms:.0f} ms) "
                f"{verdict} (< {LIMIT_MS:.0f} ms)"
            )
            figures[label] = {
                "median_ms": round(median, 1),
                "min_ms": round(min(seconds) * 1000, 1),
                "max_ms": round(max(seconds) * 1000, 1),
                "graphs": len(body["graphs"]),
                "variants_read": read,
                "index_queries_median_ms": round(query_ms, 1),
                "met": median < LIMIT_MS,
            }
        services.stop()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
