"""Fixtures shared by every test folder."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cache_server.app import build_service, create_app
from cache_server.migrate import upgrade
from cache_server.service import CacheService
from cache_server.settings import Settings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the XLA_CACHE_* settings of the shell that runs the suite."""
    for name in list(os.environ):
        if name.startswith("XLA_CACHE_"):
            monkeypatch.delenv(name)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0)


@pytest.fixture
def service(settings: Settings) -> Iterator[CacheService]:
    upgrade(settings)
    svc = build_service(settings)
    yield svc
    svc.stop()


@pytest.fixture
def client(settings: Settings, service: CacheService) -> Iterator[TestClient]:
    with TestClient(create_app(settings, service)) as test_client:
        yield test_client


@pytest.fixture
def settings_dir(settings: Settings) -> Path:
    return settings.data_dir
