"""``python -m bench.graphs``: how long ``GET /admin/graphs`` takes with 1,000,000 entries in the index.

    python -m bench.graphs                               # PostgreSQL (the machine's, a throwaway database)
    python -m bench.graphs --database sqlite --entries 200000 --reps 5 --json graphs.json

The index holds ``--entries`` entries, each with its parsed graph (an ``entry_graphs`` row), in two layouts
at once: half in one namespace ``big`` (50 graphs of 10,000 shape variants each at 1,000,000 entries, and a
baked step of :data:`BIG_BAKED` entries), the other half over 99 namespaces (each: the newcomer's fuse step,
:data:`STEP_ENTRIES` entries at one input shape with sizes baked in, cut into five modules by its edge sizes;
the seed workload's fuse graph at its 2,112 shapes, padded to seq 128; and graphs of 100 variants for the
rest). The baked steps' entries carry real bodies (the sized ops of ``tests/admin/fixtures/
torch_xla_2.7_cpu_fuse``, torch_xla 2.7: 13 sizes inside one structure, 4 edge structures), compile times
(so they rank first where the namespace is ranked by cost) and run misses naming the ``mark_step()`` line
that compiled them; the big namespace's ten largest graphs have run misses with sources too (the report
counts each graph's sources over up to 500 of its keys). The request is timed through the app in process
(routing, the ranking, one query per graph, parsing the shapes read, the analysis, the bodies compared, the
steps, the sources, the JSON), with the defaults (10 graphs, at most 2,500 variants read of each and 3,000 in
all) and with ``top=1``. Setup is not timed: rows are inserted in bulk, as ``bench.cases.index`` does.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cases.index import _insert
from tests.support.databases import fresh_database_url

LIMIT_MS = 250.0
BIG_GRAPHS = 50
SMALL_VARIANTS = 100
SEQ_LEN, PATCHES = 128, 4
FUSE = Path(__file__).resolve().parent.parent / "tests" / "admin" / "fixtures" / "torch_xla_2.7_cpu_fuse"
STEP_ENTRIES = 320  # the newcomer's namespace: one fuse step's compiles at one input shape
BIG_BAKED = 20_000  # a baked step of the big namespace (at 1,000,000 entries; scaled below)
MISSED_GRAPHS = 10  # the big namespace's graphs whose every entry has a run miss with a source
STEP_SOURCE = "fuse_seed.py:165"  # the mark_step() line the misses of a baked step name


@dataclass(frozen=True)
class Row:
    """One entry and its graph's row: where it is, its shapes, its body (a fixture's parsed entry: the
    body's columns) if any, its compile time and the source its run miss names (None: no run miss)."""

    namespace: str
    module: str
    shapes: str
    body: tuple[str, str, str, str] | None = None  # structure, program, whole, ops
    signature: str | None = None
    compile_ms: int | None = None
    source: str | None = None


def fuse_bodies() -> list[tuple[str, str, str, tuple[str, str, str, str]]]:
    """The fixture's entries parsed, in name order: (module, shapes, signature, body columns)."""
    from cache_server.parsing.hlo import parse_entry

    found = []
    for path in sorted(p for p in FUSE.iterdir() if p.name != "manifest.json"):
        info = parse_entry([path.read_bytes()])
        assert info is not None and info.body is not None and info.shapes and info.signature, path
        b = info.body
        found.append(
            (info.module, info.shapes, info.signature, (b.structure, b.program, b.whole, b.ops_text()))
        )
    return found


def baked_step(namespace: str, count: int, bodies: list[Any]) -> Iterator[Row]:
    """``count`` compiles of the fuse step at one input shape, as torch_xla cuts it: the sizes inside one
    structure under one module (4 in 5 of them), each edge structure under a module of its own."""
    inside = [b for b in bodies if b[3][0] == bodies[0][3][0]]
    edges = [b for b in bodies if b[3][0] != bodies[0][3][0]]
    for i in range(count):
        if i % 5:
            module, (_, shapes, signature, body) = "SyncTensorsGraph.37", inside[i % len(inside)]
        else:
            edge = (i // 5) % len(edges)
            module, (_, shapes, signature, body) = f"SyncTensorsGraph.{38 + edge}", edges[edge]
        yield Row(namespace, module, shapes, body, signature, 500 + i % 7, STEP_SOURCE)


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


def layout(entries: int) -> Iterator[Row]:
    """Every entry: half in "big", half over 99 namespaces (module docstring)."""
    bodies = fuse_bodies()
    big = entries // 2
    baked = min(big // 2, BIG_BAKED * entries // 1_000_000)
    yield from baked_step("big", baked, bodies)
    per_graph = max(1, (big - baked) // BIG_GRAPHS)
    for i in range(big - baked):
        graph, variant = divmod(i, per_graph)
        yield Row(
            "big",
            f"SyncTensorsGraph.{100 + graph}",
            f"(f32[{variant + 1},64], s64[{variant % 97 + 1}]) -> (f32[1])",
            source=f"train.py:{40 + graph}" if graph < MISSED_GRAPHS else None,
        )
    pairs = seed_pairs()
    spread = entries - big
    per_namespace = spread // 99
    for n in range(99):
        namespace = f"ns{n:03d}"
        count = per_namespace + (1 if n < spread % 99 else 0)
        step = min(STEP_ENTRIES, count // 2)
        yield from baked_step(namespace, step, bodies)
        for i in range(count - step):
            if i < len(pairs):
                yield Row(namespace, "SyncTensorsGraph.23", fuse_shapes(*pairs[i]))
            else:
                graph, variant = divmod(i - len(pairs), SMALL_VARIANTS)
                yield Row(namespace, f"SyncTensorsGraph.{200 + graph}", f"(f32[{variant + 1},8]) -> (f32[1])")


def fill(database: Any, entries: int, postgresql: bool) -> None:
    """Every entry's row, its graph's row (with its body, where it has one) and the run misses (one run per
    namespace). On PostgreSQL with COPY (the triggers that keep entry_totals and graph_counts run once per
    COPY, a statement); on SQLite in multi-row inserts, as ``bench.cases.index`` does."""
    from sqlalchemy import insert

    from cache_server.index.entries import EntryRecord, EntryRepository
    from cache_server.index.models import EntryGraph, Run, RunMiss

    repository = EntryRepository(database)
    now = dt.datetime.now(dt.timezone.utc)
    rows = [(f"{i:012d}", row) for i, row in enumerate(layout(entries))]
    firsts = {row.namespace: (key, row) for key, row in reversed(rows)}  # each namespace's first registers it
    repository.add_missing_entries(
        [EntryRecord(r.namespace, k, 1000, "0" * 64, now, r.compile_ms) for k, r in firsts.values()]
    )
    rest = [(key, row) for key, row in rows if firsts[row.namespace][0] != key]

    def graph(key: str, row: Row) -> dict[str, Any]:
        structure, program, whole, ops = row.body if row.body is not None else (None, None, None, None)
        return {
            "namespace": row.namespace,
            "key": key,
            "module": row.module,
            "signature": row.signature or hashlib.sha256(row.shapes.encode()).hexdigest(),
            "shapes": row.shapes,
            "structure": structure,
            "program": program,
            "whole": whole,
            "ops": ops,
            "parsed_at": now,
        }

    runs = [
        {"run_id": f"run-{ns}", "namespace": ns, "framework": "torch_xla", "host": "bench", "started_at": now}
        for ns in firsts
    ]
    misses = [
        {
            "run_id": f"run-{row.namespace}",
            "key": key,
            "namespace": row.namespace,
            "module": None,
            "compile_ms": row.compile_ms,
            "source": row.source,
            "reported_at": now,
        }
        for key, row in rows
        if row.source is not None
    ]
    with database.transaction() as session:
        session.execute(insert(Run), runs)
    if postgresql:
        raw = database.engine.raw_connection()
        try:
            with raw.cursor() as cursor:
                columns = "namespace, key, size, sha256, created_at, last_access_at, hits, compile_time_ms"
                with cursor.copy(f"COPY entries ({columns}) FROM STDIN") as copy:
                    for key, row in rest:
                        copy.write_row((row.namespace, key, 1000, "0" * 64, now, now, 0, row.compile_ms))
                fields = list(graph(*rows[0]))
                with cursor.copy(f"COPY entry_graphs ({', '.join(fields)}) FROM STDIN") as copy:
                    for key, row in rows:
                        copy.write_row(tuple(graph(key, row).values()))
                fields = ["run_id", "key", "namespace", "compile_ms", "source", "reported_at", "load_failed"]
                with cursor.copy(f"COPY run_misses ({', '.join(fields)}) FROM STDIN") as copy:
                    for miss in misses:
                        copy.write_row(tuple(miss.get(f, False) for f in fields))
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
        _insert(
            database,
            repository,
            [
                EntryRecord(row.namespace, key, 1000, "0" * 64, now, row.compile_ms)
                for key, row in rest[start : start + 50_000]
            ],
        )
    for start in range(0, len(rows), 50_000):
        with database.transaction() as session:
            session.execute(insert(EntryGraph), [graph(k, r) for k, r in rows[start : start + 50_000]])
    for start in range(0, len(misses), 50_000):
        with database.transaction() as session:
            session.execute(insert(RunMiss), misses[start : start + 50_000])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="then profile three reports of big, top 10, called in process (cProfile, by cumulative time)",
    )
    parser.add_argument(
        "--parts",
        type=int,
        default=0,
        metavar="N",
        help="then time N reports of big, top 10, called in process, each part of each (milliseconds)",
    )
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from cache_server.api.telemetry import ACCESS_LOGGER
    from cache_server.app import create_app, settle_heap
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
        settle_heap()  # as a server process does once its app is built (xla-cache-server serve)
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
                f"{first['module']} {first['variants']:,} variants; {len(body['steps'])} steps, the first "
                f"{len(body['steps'][0]['modules'])} modules; the index queries alone "
                f"{query_ms:.0f} ms) "
                f"{verdict} (< {LIMIT_MS:.0f} ms)"
            )
            figures[label] = {
                "median_ms": round(median, 1),
                "min_ms": round(min(seconds) * 1000, 1),
                "max_ms": round(max(seconds) * 1000, 1),
                "graphs": len(body["graphs"]),
                "variants_read": read,
                "steps": len(body["steps"]),
                "bodies_read": sum(g.get("bodies_read") or 0 for g in body["graphs"]),
                "index_queries_median_ms": round(query_ms, 1),
                "met": median < LIMIT_MS,
            }
        if args.profile:
            _profile(services.graphs)
        if args.parts:
            _parts(services.graphs, args.parts)
        services.stop()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def _profile(reports: Any) -> None:
    """Where a report of ``big``'s top 10 spends its time: three reports through the report service on this
    thread (a request runs on a worker thread, which cProfile does not follow), by cumulative time."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(3):
        reports.namespace_report("big", top=10)
    profile.disable()
    print("  the profile of three reports of big, top 10 (divide by 3 for one):")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


def _parts(reports: Any, count: int) -> None:
    """``count`` reports of ``big``'s top 10 through the report service on this thread (after one not
    counted), each part's milliseconds in each: the index's reads (shapes, sources, bodies), the bucketing
    analysis, parsing the bodies and their baked analysis; the medians, then the series in order (a drift
    shows as every part slowing together)."""
    from unittest import mock

    import cache_server.graphs.report as report_module
    from cache_server.index.graph_variants import GraphVariantsRepository

    spent: dict[str, float] = {}

    def timed(label: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - began

        return wrapper

    parts = [(report_module, name) for name in ("analyse", "_parsed", "baked_group_of")]
    parts += [(GraphVariantsRepository, name) for name in ("read_shapes", "sources_of", "read_bodies")]
    series: dict[str, list[float]] = {}
    with contextlib.ExitStack() as patches:
        for owner, name in parts:
            patches.enter_context(mock.patch.object(owner, name, timed(name, getattr(owner, name))))
        for turn in range(count + 1):
            spent.clear()
            began = time.perf_counter()
            reports.namespace_report("big", top=10)
            spent["the report"] = time.perf_counter() - began
            if turn:
                for label, seconds in spent.items():
                    series.setdefault(label, []).append(seconds * 1000)
    print(f"  the parts of {count} reports of big, top 10, in process (ms: median, then each in order):")
    for label, values in sorted(series.items(), key=lambda item: -statistics.median(item[1])):
        print(f"    {label:14s} {statistics.median(values):6.0f}  {' '.join(f'{v:.0f}' for v in values)}")


if __name__ == "__main__":
    raise SystemExit(main())
