"""Index databases for tests: a SQLite file, or a fresh PostgreSQL database on this machine."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text

from cache_server.settings import Settings
from tests.support.migrated import create_migrated_postgres, migrated

__all__ = ["POSTGRES_ADMIN_URL", "fresh_database_url"]

POSTGRES_ADMIN_URL = os.environ.get(
    "XLA_CACHE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@contextmanager
def fresh_database_url(kind: str, tmp_path: Path, *, at_head: bool = False) -> Iterator[str]:
    """A URL of an empty database of ``kind`` ("sqlite" or "postgresql"), dropped afterwards; ``at_head``:
    migrated to the newest revision (a copy of a template migrated once, tests/support/migrated.py)."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'index.sqlite3'}"
        if at_head:
            migrated(Settings(data_dir=tmp_path / "data", database_url=url))
        yield url
        return
    name = f"xla_cache_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        if at_head:
            create_migrated_postgres(POSTGRES_ADMIN_URL, name)
        else:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
        yield f"{base}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
