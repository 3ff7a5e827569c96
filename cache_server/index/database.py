"""The index database: one engine and one session factory, shared by every repository of the index.

:meth:`Database.transaction` is the only way a repository reaches the database: one short transaction,
with "cannot reach the database" turned into :class:`~cache_server.errors.IndexUnavailable`.
:meth:`Database.insert` is the dialect's ``INSERT`` (both SQLite and PostgreSQL know ``ON CONFLICT``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from cache_server.errors import IndexUnavailable
from cache_server.settings import Settings

__all__ = ["IN_CHUNK", "Database", "chunked", "make_engine"]

IN_CHUNK = 500
"""Bound on the items of one ``IN (...)`` list or multi-row ``INSERT`` (well under SQLite's limit)."""

T = TypeVar("T")


def chunked(items: Sequence[T], size: int = IN_CHUNK) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of at most ``size``: one query each."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def make_engine(settings: Settings) -> Engine:
    """An engine for the index: SQLite in WAL mode with a busy timeout, or a pooled PostgreSQL engine."""
    url = settings.resolved_database_url
    if url.startswith("sqlite"):
        return _sqlite_engine(url, settings)
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


def _sqlite_engine(url: str, settings: Settings) -> Engine:
    path = url.split("///", 1)[-1]
    pool: dict[str, Any] = {}
    if path and path != ":memory:":
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


class Database:
    """The engine, its sessions and transactions; one per process, shared by the repositories."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls(make_engine(settings))

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One transaction, committed when the block ends (rolled back if it raises)."""
        try:
            with self._sessions.begin() as session:
                yield session
        except PoolTimeout as exc:
            # Every pooled connection is busy (or stuck on a database that stopped answering).
            raise IndexUnavailable(
                "The index database is overloaded: no connection came free in time "
                "(XLA_CACHE_DB_POOL_TIMEOUT); please retry."
            ) from exc
        except (OperationalError, DBAPIError) as exc:
            if isinstance(exc, OperationalError) or exc.connection_invalidated:
                raise IndexUnavailable(
                    "The index database cannot be reached; the cache will answer again once it is back."
                ) from exc
            raise

    def insert(self, table: Any) -> postgresql.Insert | sqlite.Insert:
        """``INSERT`` into ``table`` in this database's dialect, with ``on_conflict_do_*`` available."""
        if self.engine.dialect.name == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    def ping(self) -> None:
        """Raise :class:`IndexUnavailable` unless the database answers."""
        with self.transaction() as session:
            session.execute(text("SELECT 1"))

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
