"""``python -m bench.graph_writes [--database postgresql|sqlite] [--revisions 0017 0023 head]``: what the
triggers that keep ``graph_counts`` (migration 0013; its compile ms since 0021; the entries locked first
since 0024) cost the writes to ``entry_graphs``.

On an index at each revision (the oldest whose ``entry_graphs`` takes what parsing records today is 0017):
20,000 entries (each with a compile time) in 20 graphs of 3,000 signatures, their graphs recorded in batches
of 50 (as the background parser records them), then evicted 1,000 at a time. Prints the median of each.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from cache_server.domain import utcnow
from cache_server.index import AdminRepository, Database, EntryRepository
from cache_server.index.graph_records import GraphRecord, GraphRepository
from cache_server.index.migrate import upgrade
from cache_server.settings import Settings
from tests.support.databases import fresh_database_url
from tests.support.entry_records import record

ENTRIES, BATCH, EVICTED = 20_000, 50, 1_000


def measure(kind: str, revision: str) -> tuple[float, float]:
    """Median seconds of one batch of parsed graphs recorded, and of one eviction."""
    with tempfile.TemporaryDirectory() as scratch, fresh_database_url(kind, Path(scratch)) as url:
        settings = Settings(data_dir=Path(scratch) / "data", database_url=url)
        upgrade(settings, revision)
        db = Database.from_settings(settings)
        try:
            entries, admin = EntryRepository(db), AdminRepository(db)
            graphs = GraphRepository(db)
            timed = [record("ns", f"k{i}", 10, compile_ms=100 + i % 7) for i in range(ENTRIES)]
            entries.record_new_entries(timed)
            parse: list[float] = []
            for start in range(0, ENTRIES, BATCH):
                batch = [
                    GraphRecord("ns", f"k{i}", f"m{i % 20}", f"s{i % 3000}", f"(f32[{i % 3000}]) -> ()")
                    for i in range(start, start + BATCH)
                ]
                began = time.perf_counter()
                graphs.record_graphs(batch)
                parse.append(time.perf_counter() - began)
            evict: list[float] = []
            for start in range(0, ENTRIES, EVICTED):
                began = time.perf_counter()
                admin.delete_entries(
                    [("ns", f"k{i}") for i in range(start, start + EVICTED)],
                    policy="lru",
                    when=utcnow(),
                    count_evictions=True,
                )
                evict.append(time.perf_counter() - began)
            return statistics.median(parse), statistics.median(evict)
        finally:
            db.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--revisions", nargs="+", default=["0017", "0023", "head"])
    args = parser.parse_args()
    kind = args.database
    for revision in args.revisions:
        parse, evict = measure(kind, revision)
        print(
            f"{kind} at {revision}: a batch of {BATCH} parsed graphs recorded in {parse * 1000:.2f} ms, "
            f"an eviction of {EVICTED:,} entries in {evict * 1000:.0f} ms (medians)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
