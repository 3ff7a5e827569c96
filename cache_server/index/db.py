"""Engine and session factory of the index, built from :class:`~cache_server.settings.Settings`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from cache_server.settings import Settings

__all__ = ["make_engine", "make_sessionmaker"]


def make_engine(settings: Settings) -> Engine:
    """An engine for the index: SQLite in WAL mode with a busy timeout, or a pooled PostgreSQL engine."""
    url = settings.resolved_database_url
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        pool: dict[str, Any] = {}
        if path and path != ":memory:":
            from pathlib import Path

            Path(path).parent.mkdir(parents=True, exist_ok=True)
            # A file database gets a queue pool sized like PostgreSQL's; :memory: keeps its one connection.
            pool = {
                "pool_size": settings.db_pool_size,
                "max_overflow": settings.db_max_overflow,
                "pool_timeout": settings.db_pool_timeout,
            }
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": settings.db_pool_timeout},
            pool_pre_ping=settings.db_pool_pre_ping,
            **pool,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(settings.db_pool_timeout * 1000)}")
            cursor.close()

        return engine
    connect_args: dict[str, Any] = {}
    if url.startswith("postgresql"):
        connect_args["connect_timeout"] = max(1, int(settings.db_connect_timeout))
    return create_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout,
        pool_pre_ping=settings.db_pool_pre_ping,
        connect_args=connect_args,
    )


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
