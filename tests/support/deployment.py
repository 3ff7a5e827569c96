"""Deployments for the production and reliability tests: an index database and a blob store, as a server
would be given. The conftest of each suite imports the ``deployment`` fixture from here.

``deployment`` is parametrized by the tests (``indirect``) with ``"<database>-<storage>"``: database
``sqlite`` or ``postgresql`` (a fresh database on this machine's server, dropped afterwards), storage
``local`` (a directory) or ``gcs`` (a bucket on a fake-gcs-server emulator).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cache_server.settings import Settings
from tests.support.databases import fresh_database_url
from tests.support.server import run_cli

__all__ = ["Deployment", "deployment"]


@dataclass
class Deployment:
    """Where the index and the blobs live, as settings and as the ``XLA_CACHE_*`` variables of a server."""

    database: str
    storage: str
    database_url: str
    storage_url: str
    extra_env: dict[str, str] = field(default_factory=dict)

    def settings(self, data_dir: Path, **overrides: object) -> Settings:
        return Settings(
            data_dir=data_dir, database_url=self.database_url, storage_url=self.storage_url, **overrides
        )

    def env(self, **more: str) -> dict[str, str]:
        return {
            "XLA_CACHE_DATABASE_URL": self.database_url,
            "XLA_CACHE_STORAGE_URL": self.storage_url,
            **self.extra_env,
            **more,
        }

    def cli(self, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
        """``xla-cache-server ARGS`` run to its end against this deployment, in ``data_dir``."""
        return run_cli(self.env(XLA_CACHE_DATA_DIR=str(data_dir)), *args)


@pytest.fixture
def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deployment]:
    database, storage = str(request.param).split("-")
    with fresh_database_url(database, tmp_path) as database_url:
        if storage == "local":
            yield Deployment(database, storage, database_url, (tmp_path / "shared-blobs").as_uri())
            return
        assert storage == "gcs", storage
        endpoint: str = request.getfixturevalue("fake_gcs_endpoint")
        bucket: str = request.getfixturevalue("gcs_bucket")
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)  # for stores built in this process
        yield Deployment(
            database, storage, database_url, f"gs://{bucket}/cache", {"STORAGE_EMULATOR_HOST": endpoint}
        )
