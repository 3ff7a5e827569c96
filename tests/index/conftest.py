from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cache_server.index.db import make_engine, make_sessionmaker
from cache_server.index.repository import IndexRepository
from cache_server.migrate import upgrade
from cache_server.settings import Settings
from tests.support.databases import fresh_database_url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """Settings whose index is an empty database of each kind (PostgreSQL: created and dropped here)."""
    with fresh_database_url(request.param, tmp_path) as url:
        yield Settings(data_dir=tmp_path / "data", database_url=url)


@pytest.fixture
def repo(db_settings: Settings) -> Iterator[IndexRepository]:
    """The index repository over a migrated, empty database of each kind."""
    upgrade(db_settings)
    engine = make_engine(db_settings)
    yield IndexRepository(engine, make_sessionmaker(engine))
    engine.dispose()
