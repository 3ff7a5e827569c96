"""An entry's change feed rows, which go with its row (``ON DELETE CASCADE``), are found by their key
(migration 0016): without the index each entry removed read its namespace's whole feed, and a purge of
100,000 entries was quadratic (issue 36, item 7)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from cache_server.index import Database
from cache_server.settings import Settings
from tests.support.migrated import migrated


def test_the_cascade_to_the_feed_reads_one_entrys_rows_by_its_key(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    migrated(settings)
    database = Database.from_settings(settings)
    try:
        with database.engine.connect() as connection:
            plan = connection.execute(
                text("EXPLAIN QUERY PLAN SELECT seq FROM entry_feed WHERE namespace = 'ns' AND key = 'k'")
            ).all()
    finally:
        database.dispose()
    details = " ".join(str(row[-1]) for row in plan)
    assert "ix_entry_feed_namespace_key" in details, details
