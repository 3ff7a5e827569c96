"""Admin test fixtures: an app with auth on, and a token per role."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cache_server.app import create_app
from cache_server.auth.tokens import Role
from cache_server.settings import Settings
from tests.support.apps import services_of
from tests.support.migrated import migrated


@pytest.fixture
def auth_settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0, auth=True)


@pytest.fixture
def auth_client(auth_settings: Settings) -> Iterator[TestClient]:
    migrated(auth_settings)
    with TestClient(create_app(auth_settings)) as test_client:
        yield test_client


@pytest.fixture
def tokens(auth_client: TestClient) -> dict[str, str]:
    """One token per role, plus one that is revoked (it had the admin role)."""
    manager = services_of(auth_client).tokens
    made = {role.label: manager.create(f"user-{role.label}", role)[0] for role in Role}
    made["revoked"] = manager.create("former-admin", Role.ADMIN)[0]
    manager.revoke("former-admin")
    return made
