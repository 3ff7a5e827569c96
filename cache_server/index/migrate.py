"""Alembic, driven from the same :class:`~cache_server.settings.Settings` as the server."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text

from cache_server.settings import Settings

__all__ = ["MIGRATION_LOCK_ID", "alembic_config", "downgrade", "one_at_a_time", "script_location", "upgrade"]


def script_location() -> Path:
    """The migrations folder: ``migrations/`` in a checkout, ``cache_server/_migrations`` in a wheel."""
    package = Path(__file__).resolve().parents[1]  # cache_server/
    for candidate in (package.parent / "migrations", package / "_migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError("The Alembic migrations folder is missing from this installation.")


def alembic_config(settings: Settings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    config.attributes["settings"] = settings
    return config


MIGRATION_LOCK_ID = 0x58_4C_41_43  # "XLAC": the PostgreSQL advisory lock migrations hold


@contextmanager
def one_at_a_time(settings: Settings) -> Iterator[None]:
    """Hold the index's migration lock: replicas and workers that migrate at the same moment take turns,
    and those after the first find the index at head and do nothing (without it, two would both create
    the same tables and one would fail).

    PostgreSQL: a session advisory lock on a connection of its own, with no statement timeout (a migration
    may take longer than the bound on a request). A SQLite file: ``flock`` on ``<database>.migrate.lock``
    beside it (SQLite is one host's). An in-memory database has nobody to race. The PostgreSQL lock is a
    session's: run migrations on a direct connection, not through a pooler in transaction mode.
    """
    url = settings.resolved_database_url
    if url.startswith("postgresql"):
        from cache_server.index.database import make_engine

        engine = make_engine(settings)
        try:
            with engine.connect() as connection:
                connection.execute(text("SET statement_timeout = 0"))
                connection.execute(text("SET lock_timeout = 0"))
                connection.execute(text("SELECT pg_advisory_lock(:id)"), {"id": MIGRATION_LOCK_ID})
                connection.commit()  # the lock is the session's: it outlives this transaction
                try:
                    yield
                finally:
                    # Closing the connection releases the lock too: a failed unlock must not hide the
                    # migration's own error.
                    with contextlib.suppress(Exception):
                        connection.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": MIGRATION_LOCK_ID})
                        connection.commit()
        finally:
            engine.dispose()
        return
    path = url.split("///", 1)[1].split("?", 1)[0] if url.startswith("sqlite") and "///" in url else ""
    if not path or path == ":memory:":
        yield
        return
    lock_path = Path(f"{path}.migrate.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def upgrade(settings: Settings, revision: str = "head") -> None:
    """Bring the index to ``revision`` (the newest by default); safe to run from many processes at once."""
    with one_at_a_time(settings):
        command.upgrade(alembic_config(settings), revision)


def downgrade(settings: Settings, revision: str = "base") -> None:
    with one_at_a_time(settings):
        command.downgrade(alembic_config(settings), revision)
