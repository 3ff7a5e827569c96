"""The pool and timeout settings reach the engine, and every way of losing the database is a clean
:class:`IndexUnavailable` (never a raw driver error), on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from cache_server.errors import IndexUnavailable
from cache_server.index import Database, EntryRepository
from cache_server.settings import Settings
from tests.support.databases import fresh_database_url
from tests.support.server import free_port
from tests.support.tcp_proxy import TcpProxy, tcp_proxy


def finishes(call: Callable[[], object], within: float = 30.0) -> BaseException | None:
    """Run ``call`` in a thread; fail the test if it hangs. Returns what it raised, if anything."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert not thread.is_alive(), "the call hung instead of failing"
    return raised[0] if raised else None


def test_pool_settings_reach_the_engine(migrated_settings: Settings) -> None:
    tight = migrated_settings.model_copy(
        update={"db_pool_size": 1, "db_max_overflow": 0, "db_pool_timeout": 0.3}
    )
    db = Database.from_settings(tight)
    try:
        db.ping()
        held = db.engine.connect()  # the one connection the pool may hand out
        try:
            error = finishes(db.ping)
            assert isinstance(error, IndexUnavailable)
            assert "XLA_CACHE_DB_POOL_TIMEOUT" in error.detail
        finally:
            held.close()
        db.ping()  # the connection came back: usable again
    finally:
        db.dispose()


@pytest.fixture
def proxied_postgres(tmp_path: Path) -> Iterator[tuple[Settings, TcpProxy]]:
    """Settings of a fresh PostgreSQL database reached through a proxy the test can cut."""
    with fresh_database_url("postgresql", tmp_path, at_head=True) as url:
        parsed = make_url(url)
        with tcp_proxy(parsed.host or "127.0.0.1", parsed.port or 5432) as proxy:
            proxied = parsed.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
            yield Settings(data_dir=tmp_path / "data", database_url=proxied, db_connect_timeout=1), proxy


@pytest.mark.parametrize("pre_ping", [True, False])
def test_pre_ping_setting_decides_who_sees_a_restarted_database(
    proxied_postgres: tuple[Settings, TcpProxy], pre_ping: bool
) -> None:
    settings, proxy = proxied_postgres
    db = Database.from_settings(settings.model_copy(update={"db_pool_pre_ping": pre_ping}))
    try:
        db.ping()  # a pooled connection now exists
        proxy.refuse()
        proxy.forward()  # the database "restarted": the pooled connection is dead, new ones work
        if pre_ping:
            db.ping()  # the dead connection is noticed before use and replaced
        else:
            with pytest.raises(IndexUnavailable):
                db.ping()  # the first caller gets the dead connection...
            db.ping()  # ...which is then thrown away
    finally:
        db.dispose()


def test_refused_and_unanswered_connections_are_index_unavailable(
    proxied_postgres: tuple[Settings, TcpProxy],
) -> None:
    settings, proxy = proxied_postgres
    db = Database.from_settings(settings)
    try:
        db.ping()
        proxy.refuse()
        error = finishes(lambda: EntryRepository(db).get_entry("ns", "k"))
        assert isinstance(error, IndexUnavailable)
        assert "cannot be reached" in error.detail
        # A host that swallows packets: only XLA_CACHE_DB_CONNECT_TIMEOUT stops the wait.
        proxy.blackhole()
        assert isinstance(finishes(db.ping), IndexUnavailable)
        proxy.forward()
        db.ping()  # back by itself, same engine
        assert EntryRepository(db).get_entry("ns", "k") is None
    finally:
        db.dispose()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_unreachable_database_is_index_unavailable(kind: str, tmp_path: Path) -> None:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path}"  # a directory: SQLite cannot open it
    else:
        url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing"  # nobody listens
    db = Database.from_settings(Settings(data_dir=tmp_path / "data", database_url=url, db_connect_timeout=1))
    try:
        with pytest.raises(IndexUnavailable, match="cannot be reached"):
            db.ping()
    finally:
        db.dispose()


def test_a_database_that_stops_answering_is_index_unavailable_within_the_bound(
    proxied_postgres: tuple[Settings, TcpProxy],
) -> None:
    """Connected, and nothing answers (a frozen database process or proxy: the kernel still acknowledges
    the bytes, so TCP timeouts never fire): each call ends after the statement timeout, as a 503."""
    settings, proxy = proxied_postgres
    db = Database.from_settings(settings.model_copy(update={"db_statement_timeout": 2.0}))
    try:
        db.ping()  # a pooled connection now exists
        proxy.stall()
        started = time.monotonic()
        error = finishes(lambda: EntryRepository(db).get_entry("ns", "k"), within=20)
        assert isinstance(error, IndexUnavailable)
        assert time.monotonic() - started < 8
        assert isinstance(finishes(db.ping, within=20), IndexUnavailable)  # a new connection: held too
        proxy.forward()
        db.ping()  # back by itself, same engine
        assert EntryRepository(db).get_entry("ns", "k") is None
    finally:
        db.dispose()
