"""Index databases for tests: a SQLite file, or a fresh PostgreSQL database on this machine."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text

__all__ = ["POSTGRES_ADMIN_URL", "fresh_database_url"]

POSTGRES_ADMIN_URL = os.environ.get(
    "XLA_CACHE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@contextmanager
def fresh_database_url(kind: str, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database of ``kind`` ("sqlite" or "postgresql"), dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'index.sqlite3'}"
        return
    name = f"xla_cache_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
        yield f"{base}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
