"""Index databases at the newest migration for tests, migrated once per test process and copied per test.

Running Alembic's migrations costs about 0.35 s on a SQLite file and 0.65 s on PostgreSQL, and hundreds of
tests want an empty index at head. The migrations run for real once per kind (on a template made the first
time one is asked for); each test then gets a copy: the template's file for SQLite, ``CREATE DATABASE ...
TEMPLATE`` for PostgreSQL. The tests of the migrations themselves (tests/index/test_migrations.py and the
backfill in test_totals.py) still migrate their own empty databases.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import sqlite3
import tempfile
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text

from cache_server.index.migrate import upgrade
from cache_server.settings import Settings

__all__ = ["create_migrated_postgres", "migrated", "sqlite_file"]


def sqlite_file(settings: Settings) -> Path | None:
    """The file of a SQLite index (the embedded default included); None for PostgreSQL or ``:memory:``."""
    url = settings.resolved_database_url
    if not url.startswith("sqlite") or "///" not in url:
        return None
    path = url.split("///", 1)[1].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def migrated(settings: Settings) -> None:
    """What ``upgrade(settings)`` does to a new index, cheaper: a SQLite file that does not exist yet
    becomes a copy of the migrated template; any other database is migrated by ``upgrade``."""
    target = sqlite_file(settings)
    if target is None or target.exists():
        upgrade(settings)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_sqlite_template(), target)


@functools.cache
def _sqlite_template() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="xla-cache-migrated-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "index.sqlite3"
    upgrade(Settings(data_dir=folder, database_url=f"sqlite:///{path}"))
    # Everything in the one file: the index runs in WAL mode, and a copy takes only the main file.
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    wal = path.with_name(f"{path.name}-wal")
    assert not wal.exists() or wal.stat().st_size == 0, "the template's WAL was not folded into its file"
    return path


def create_migrated_postgres(admin_url: str, name: str) -> None:
    """Create the PostgreSQL database ``name`` at head, as a copy of the process's migrated template."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{_postgres_template(admin_url)}"'))
    finally:
        admin.dispose()


@functools.cache
def _postgres_template(admin_url: str) -> str:
    name = f"xla_cache_template_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    atexit.register(_drop_postgres, admin_url, name)
    # upgrade() disposes its engines: nobody is connected to the template when it is copied.
    upgrade(Settings(database_url=f"{admin_url.rsplit('/', 1)[0]}/{name}"))
    return name


def _drop_postgres(admin_url: str, name: str) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
