"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cache_server.app import create_app
from cache_server.domain import Clock, utcnow
from cache_server.settings import Settings
from cache_server.wiring import Services, build_services
from tests.support.migrated import migrated


@pytest.fixture(scope="session", autouse=True)
def shared_bytecode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One bytecode cache for every Python process the suite starts (jobs, servers, CLIs): its folder.

    Where ``PYTHONDONTWRITEBYTECODE`` is set (as in this project's containers) and the environment holds no
    ``.pyc`` files, every process compiles what it imports again: about 13 s of CPU for each torch_xla job
    (``import torch_xla`` took 24 s of CPU, 10 s from bytecode), a second or two for each server. With
    ``PYTHONPYCACHEPREFIX`` set, the first process writes the bytecode under pytest's temp folder (nothing is
    written into the environment) and every later one reads it. They run the same code.
    """
    folder = tmp_path_factory.mktemp("pycache")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        patch.setenv("PYTHONPYCACHEPREFIX", str(folder))
        yield folder


@pytest.fixture(scope="session", autouse=True)
def no_config_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """No process the suite starts reads the config file of the user who runs it: ``XDG_CONFIG_HOME`` is an
    empty folder (it outlives the ``XLA_CACHE_*`` filters that subprocess environments apply)."""
    folder = tmp_path_factory.mktemp("config-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(folder))
        yield folder


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the XLA_CACHE_* settings of the shell that runs the suite, and none talks to the default
    server (``http://127.0.0.1:8080``, where a developer's own ``./scripts/serve`` may listen) by accident:
    ``XLA_CACHE_SERVER=none`` unless the test names a server."""
    for name in list(os.environ):
        if name.startswith("XLA_CACHE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XLA_CACHE_SERVER", "none")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0)


@pytest.fixture
def clock() -> Clock:
    """What the server's services read the time from (a test module may override it to age entries)."""
    return utcnow


@pytest.fixture
def monotonic(request: pytest.FixtureRequest) -> Callable[[], float]:
    """What the services time memory copies with: ``time.monotonic``, or the clock a test passes in
    (``@pytest.mark.parametrize("monotonic", [ManualMonotonic()], indirect=True)``)."""
    given: Callable[[], float] | None = getattr(request, "param", None)
    return given if given is not None else time.monotonic


@pytest.fixture
def services(settings: Settings, clock: Clock, monotonic: Callable[[], float]) -> Iterator[Services]:
    """The server's parts over a fresh embedded index and store (started and stopped by ``client``)."""
    migrated(settings)
    built = build_services(settings, clock=clock, monotonic=monotonic)
    yield built
    built.stop()


@pytest.fixture
def client(settings: Settings, services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(settings, services)) as test_client:
        yield test_client


@pytest.fixture
def settings_dir(settings: Settings) -> Path:
    return settings.data_dir
