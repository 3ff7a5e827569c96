from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cache_server.index import Database, EntryRepository
from cache_server.index.namespaces import NamespaceRepository
from cache_server.settings import Settings
from tests.support.databases import fresh_database_url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """Settings whose index is an empty database of each kind (PostgreSQL: created and dropped here)."""
    with fresh_database_url(request.param, tmp_path) as url:
        yield Settings(data_dir=tmp_path / "data", database_url=url)


@pytest.fixture(params=["sqlite", "postgresql"])
def migrated_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """Settings whose index is an empty database of each kind at the newest migration (a copy of one
    migrated once: tests/support/migrated.py)."""
    with fresh_database_url(request.param, tmp_path, at_head=True) as url:
        yield Settings(data_dir=tmp_path / "data", database_url=url)


@pytest.fixture
def database(migrated_settings: Settings) -> Iterator[Database]:
    """The index's Database over a migrated, empty database of each kind."""
    db = Database.from_settings(migrated_settings)
    yield db
    db.dispose()


@pytest.fixture
def repo(database: Database) -> EntryRepository:
    """The entries repository over a migrated, empty database of each kind."""
    return EntryRepository(database)


@pytest.fixture
def namespaces(database: Database) -> NamespaceRepository:
    """The namespaces' repository over the same database as ``repo``."""
    return NamespaceRepository(database)
