"""``python -m bench.graph_writes [postgresql|sqlite]``: what the triggers that keep ``graph_counts``
(migration 0013) cost the writes to ``entry_graphs``.

On an index at 0012 (no triggers) and at head: 20,000 entries in 20 graphs of 3,000 signatures, their
graphs recorded in batches of 50 (as the background parser records them), then evicted 1,000 at a time.
Prints the median of each.
"""

from __future__ import annotations

import statistics
import sys
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
            entries.record_new_entries([record("ns", f"k{i}", 10) for i in range(ENTRIES)])
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
    kind = sys.argv[1] if len(sys.argv) > 1 else "postgresql"
    for revision in ("0012", "head"):
        parse, evict = measure(kind, revision)
        print(
            f"{kind} at {revision}: a batch of {BATCH} parsed graphs recorded in {parse * 1000:.2f} ms, "
            f"an eviction of {EVICTED:,} entries in {evict * 1000:.0f} ms (medians)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
