"""The pool and timeout settings reach the engine, and every way of losing the database is a clean
:class:`IndexUnavailable` (never a raw driver error), on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from cache_server.errors import IndexUnavailable
from cache_server.index.db import make_engine, make_sessionmaker
from cache_server.index.repository import IndexRepository
from cache_server.migrate import upgrade
from cache_server.settings import Settings
from tests.support.databases import fresh_database_url
from tests.support.server import free_port
from tests.support.tcp_proxy import TcpProxy, tcp_proxy


def repository(settings: Settings) -> IndexRepository:
    engine = make_engine(settings)
    return IndexRepository(engine, make_sessionmaker(engine))


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


def test_pool_settings_reach_the_engine(db_settings: Settings) -> None:
    upgrade(db_settings)
    tight = db_settings.model_copy(update={"db_pool_size": 1, "db_max_overflow": 0, "db_pool_timeout": 0.3})
    repo = repository(tight)
    try:
        repo.ping()
        held = repo.engine.connect()  # the one connection the pool may hand out
        try:
            error = finishes(repo.ping)
            assert isinstance(error, IndexUnavailable)
            assert "XLA_CACHE_DB_POOL_TIMEOUT" in error.detail
        finally:
            held.close()
        repo.ping()  # the connection came back: usable again
    finally:
        repo.engine.dispose()


@pytest.fixture
def proxied_postgres(tmp_path: Path) -> Iterator[tuple[Settings, TcpProxy]]:
    """Settings of a fresh PostgreSQL database reached through a proxy the test can cut."""
    with fresh_database_url("postgresql", tmp_path) as url:
        upgrade(Settings(database_url=url))
        parsed = make_url(url)
        with tcp_proxy(parsed.host or "127.0.0.1", parsed.port or 5432) as proxy:
            proxied = parsed.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
            yield Settings(data_dir=tmp_path / "data", database_url=proxied, db_connect_timeout=1), proxy


@pytest.mark.parametrize("pre_ping", [True, False])
def test_pre_ping_setting_decides_who_sees_a_restarted_database(
    proxied_postgres: tuple[Settings, TcpProxy], pre_ping: bool
) -> None:
    settings, proxy = proxied_postgres
    repo = repository(settings.model_copy(update={"db_pool_pre_ping": pre_ping}))
    try:
        repo.ping()  # a pooled connection now exists
        proxy.refuse()
        proxy.forward()  # the database "restarted": the pooled connection is dead, new ones work
        if pre_ping:
            repo.ping()  # the dead connection is noticed before use and replaced
        else:
            with pytest.raises(IndexUnavailable):
                repo.ping()  # the first caller gets the dead connection...
            repo.ping()  # ...which is then thrown away
    finally:
        repo.engine.dispose()


def test_refused_and_unanswered_connections_are_index_unavailable(
    proxied_postgres: tuple[Settings, TcpProxy],
) -> None:
    settings, proxy = proxied_postgres
    repo = repository(settings)
    try:
        repo.ping()
        proxy.refuse()
        error = finishes(lambda: repo.get_entry("ns", "k"))
        assert isinstance(error, IndexUnavailable)
        assert "cannot be reached" in error.detail
        # A host that swallows packets: only XLA_CACHE_DB_CONNECT_TIMEOUT stops the wait.
        proxy.blackhole()
        assert isinstance(finishes(repo.ping), IndexUnavailable)
        proxy.forward()
        repo.ping()  # back by itself, same engine
        assert repo.get_entry("ns", "k") is None
    finally:
        repo.engine.dispose()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_unreachable_database_is_index_unavailable(kind: str, tmp_path: Path) -> None:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path}"  # a directory: SQLite cannot open it
    else:
        url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing"  # nobody listens
    repo = repository(Settings(data_dir=tmp_path / "data", database_url=url, db_connect_timeout=1))
    try:
        with pytest.raises(IndexUnavailable, match="cannot be reached"):
            repo.ping()
    finally:
        repo.engine.dispose()
