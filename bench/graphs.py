"""``python -m bench.graphs``: how long ``GET /admin/graphs`` takes with 1,000,000 entries in the index.

    python -m bench.graphs                               # PostgreSQL (the machine's, a throwaway database)
    python -m bench.graphs --database sqlite --entries 200000 --reps 5 --json graphs.json

The index holds ``--entries`` entries, each with its parsed graph (an ``entry_graphs`` row), in two layouts
at once: half in one namespace ``big`` (50 graphs of 10,000 shape variants each at 1,000,000 entries), the
other half over 99 namespaces (each: the seed workload's fuse graph at its 2,112 shapes, padded to seq 128,
and graphs of 100 variants for the rest). The request is timed through the app in process (routing, the
index's two queries per graph, parsing the shapes read, the analysis, the JSON), with the defaults
(10 graphs, at most 2,000 variants read of each) and with ``top=1``. Setup is not timed: rows are
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


def fill(database: Any, entries: int) -> None:
    from sqlalchemy import insert

    from cache_server.index.entries import EntryRecord, EntryRepository
    from cache_server.index.models import EntryGraph

    repository = EntryRepository(database)
    now = dt.datetime.now(dt.timezone.utc)
    records: list[EntryRecord] = []
    graphs: list[dict[str, Any]] = []

    def flush() -> None:
        if not records:
            return
        _insert(database, repository, records)
        with database.transaction() as session:
            session.execute(insert(EntryGraph), graphs)
        records.clear()
        graphs.clear()

    for i, (namespace, module, shapes) in enumerate(layout(entries)):
        key = f"{i:012d}"
        records.append(EntryRecord(namespace, key, 1000, "0" * 64, created_at=now))
        signature = hashlib.sha256(shapes.encode()).hexdigest()
        graphs.append(
            {"namespace": namespace, "key": key, "module": module, "signature": signature, "shapes": shapes}
        )
        if len(records) >= 50_000:
            flush()
    flush()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    logging.getLogger("cache_server.api.middleware").setLevel(logging.WARNING)  # no access log lines

    from fastapi.testclient import TestClient
    from sqlalchemy import text

    from cache_server.app import create_app
    from cache_server.migrate import upgrade
    from cache_server.settings import Settings
    from tests.support.apps import services_of

    figures: dict[str, Any] = {"database": args.database, "entries": args.entries, "limit_ms": LIMIT_MS}
    with tempfile.TemporaryDirectory() as scratch, fresh_database_url(args.database, Path(scratch)) as url:
        settings = Settings(data_dir=Path(scratch) / "data", database_url=url, db_statement_timeout=900)
        upgrade(settings)
        client = TestClient(create_app(settings))  # its lifespan is not entered: no background work
        services = services_of(client)
        started = time.perf_counter()
        fill(services.database, args.entries)
        if args.database == "postgresql":
            with services.database.transaction() as session:
                session.execute(text("ANALYZE"))
        figures["setup_s"] = round(time.perf_counter() - started, 1)
        print(f"{args.database}: {args.entries:,} entries with their graphs set up in {figures['setup_s']} s")
        cases = {
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
            median = statistics.median(seconds) * 1000
            verdict = "met" if median < LIMIT_MS else "NOT MET"
            read = sum(g["read"] for g in body["graphs"])
            print(
                f"  {label}: median {median:.0f} ms (min {min(seconds) * 1000:.0f}, max "
                f"{max(seconds) * 1000:.0f}; {len(body['graphs'])} graphs, {read:,} variants read; first: "
                f"{first['module']} {first['variants']:,} variants) {verdict} (< {LIMIT_MS:.0f} ms)"
            )
            figures[label] = {
                "median_ms": round(median, 1),
                "min_ms": round(min(seconds) * 1000, 1),
                "max_ms": round(max(seconds) * 1000, 1),
                "graphs": len(body["graphs"]),
                "variants_read": read,
                "met": median < LIMIT_MS,
            }
        services.stop()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
