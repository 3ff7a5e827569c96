"""The index database: one engine and one session factory, shared by every repository of the index.

:meth:`Database.transaction` is the only way a repository reaches the database: one short transaction,
with "cannot reach the database" turned into :class:`~cache_server.errors.IndexUnavailable`.
:meth:`Database.insert` is the dialect's ``INSERT`` (both SQLite and PostgreSQL know ``ON CONFLICT``).

Every call has a bounded time (``XLA_CACHE_DB_STATEMENT_TIMEOUT``). PostgreSQL enforces it itself
(``statement_timeout``, ``lock_timeout``) while it answers, and TCP keepalives and ``tcp_user_timeout``
notice a host that vanished. A server that holds the connection open and answers nothing (a frozen process
or proxy: the kernel still acknowledges the bytes) is caught by :class:`_Watchdog`, which shuts down the
socket of a transaction stuck longer than that, so the request gets a 503 instead of hanging.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from cache_server.errors import IndexUnavailable
from cache_server.settings import Settings

__all__ = ["IN_CHUNK", "Database", "chunked", "foreign_key_violated", "make_engine"]

IN_CHUNK = 500
"""Bound on the items of one ``IN (...)`` list or multi-row ``INSERT`` (well under SQLite's limit)."""

T = TypeVar("T")
log = logging.getLogger(__name__)
_SQLITE_CONSTRAINT_FOREIGNKEY = 787  # named in Python's sqlite3 from 3.11 on
_FOREIGN_KEY_VIOLATION = "23503"  # PostgreSQL's SQLSTATE


def chunked(items: Sequence[T], size: int = IN_CHUNK) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of at most ``size``: one query each."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def foreign_key_violated(exc: IntegrityError) -> bool:
    """Whether the statement that raised ``exc`` broke a foreign key (on PostgreSQL or SQLite)."""
    orig = exc.orig
    return (
        getattr(orig, "sqlstate", None) == _FOREIGN_KEY_VIOLATION
        or getattr(orig, "sqlite_errorcode", None) == _SQLITE_CONSTRAINT_FOREIGNKEY
    )


def make_engine(settings: Settings) -> Engine:
    """An engine for the index: SQLite in WAL mode with a busy timeout, or a pooled PostgreSQL engine."""
    url = settings.resolved_database_url
    if url.startswith("sqlite"):
        return _sqlite_engine(url, settings)
    connect_args: dict[str, Any] = {}
    if url.startswith("postgresql"):
        bound_ms = int(settings.db_statement_timeout * 1000)
        connect_args.update(
            connect_timeout=max(1, int(settings.db_connect_timeout)),
            options=f"-c statement_timeout={bound_ms} -c lock_timeout={bound_ms}",
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
            tcp_user_timeout=bound_ms,
        )
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


class _Watchdog:
    """Shuts down the socket of a transaction that has waited on the database longer than its bound.

    The blocked driver call then fails at once (the connection is invalidated, the caller gets
    :class:`IndexUnavailable`) instead of waiting for a server that will never answer.
    """

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[float, Any]] = {}  # thread -> (deadline, DBAPI connection)
        self._thread: threading.Thread | None = None

    def watch(self, dbapi_connection: Any) -> None:
        with self._lock:
            self._watched[threading.get_ident()] = (time.monotonic() + self._timeout, dbapi_connection)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="xla-cache-db-watchdog", daemon=True)
                self._thread.start()

    def unwatch(self) -> None:
        with self._lock:
            self._watched.pop(threading.get_ident(), None)

    def _run(self) -> None:
        while True:
            time.sleep(min(1.0, self._timeout / 4))
            now = time.monotonic()
            with self._lock:
                late = [conn for deadline, conn in self._watched.values() if deadline < now]
                for ident in [i for i, (deadline, _) in self._watched.items() if deadline < now]:
                    del self._watched[ident]
            for conn in late:
                _shut_down(conn)


def _shut_down(dbapi_connection: Any) -> None:
    """Shut down a PostgreSQL connection's socket (the driver's own call then fails with it)."""
    fileno = getattr(getattr(dbapi_connection, "pgconn", None), "socket", -1)
    if not isinstance(fileno, int) or fileno < 0:
        return
    log.warning("the index database did not answer in time; dropping its connection")
    with contextlib.suppress(OSError):
        sock = socket.fromfd(fileno, socket.AF_INET, socket.SOCK_STREAM)  # a duplicate descriptor
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()  # closes the duplicate only


class Database:
    """The engine, its sessions and transactions; one per process, shared by the repositories."""

    def __init__(self, engine: Engine, statement_timeout: float = 30.0) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._watchdog = _Watchdog(statement_timeout) if engine.dialect.name == "postgresql" else None
        if self._watchdog is not None:
            # The pool's pre-ping runs before a transaction has its connection: bound it the same way.
            ping = engine.dialect.do_ping
            watchdog = self._watchdog

            def watched_ping(dbapi_connection: Any) -> bool:
                watchdog.watch(dbapi_connection)
                try:
                    return bool(ping(dbapi_connection))
                finally:
                    watchdog.unwatch()

            engine.dialect.do_ping = watched_ping  # type: ignore[method-assign]

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls(make_engine(settings), settings.db_statement_timeout)

    @contextmanager
    def transaction(self, *, streaming: bool = False) -> Iterator[Session]:
        """One transaction, committed when the block ends (rolled back if it raises).

        Bounded by the statement timeout unless ``streaming`` (a read whose caller does work between rows,
        such as eviction's walk over every entry).
        """
        with self._mapped_errors():
            if self._watchdog is None or streaming:
                with self._sessions.begin() as session:
                    yield session
                return
            with self._sessions() as session:
                self._watchdog.watch(session.connection().connection.dbapi_connection)
                try:
                    yield session
                    session.commit()
                except BaseException:
                    session.rollback()
                    raise
                finally:
                    self._watchdog.unwatch()

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A Core connection for reads (no ORM session: a point lookup costs half as much), bounded by the
        statement timeout as a whole (a manifest with a byte budget may walk a namespace in it); what it
        began is rolled back at the end."""
        with self._mapped_errors(), self.engine.connect() as connection:
            if self._watchdog is None:
                yield connection
                return
            self._watchdog.watch(connection.connection.dbapi_connection)
            try:
                yield connection
            finally:
                self._watchdog.unwatch()

    @contextmanager
    def _mapped_errors(self) -> Iterator[None]:
        """An unreachable, overloaded or full database as :class:`IndexUnavailable`."""
        try:
            yield
        except PoolTimeout as exc:
            # Every pooled connection is busy (or stuck on a database that stopped answering).
            raise IndexUnavailable(
                "The index database is overloaded: no connection came free in time "
                "(XLA_CACHE_DB_POOL_TIMEOUT); please retry."
            ) from exc
        except (OperationalError, DBAPIError) as exc:
            if getattr(exc.orig, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                raise IndexUnavailable(
                    "The disk of the index database is full; free space on it (the blobs share it by "
                    "default) and retry."
                ) from exc
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
