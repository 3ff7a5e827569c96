"""Fixtures shared by every test folder."""

from __future__ import annotations

import ast
import functools
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

TESTS = Path(__file__).resolve().parent
# torch 2.7's inductor starts a pool of compile workers (a process that imports torch, then its workers) when
# torch_xla is imported, and the XLA path never uses it: about 10 s of CPU in each torch_xla job of the
# suite, on a 2-core machine. Every job the tests start inherits this (their environments copy this one's).
os.environ.setdefault("TORCH_WARM_POOL", "0")
# What starts another process: a server, a framework job, a browser, an emulator, a CLI, a child
_STARTS_PROCESSES = frozenset({"subprocess", "multiprocessing", "playwright", "concurrent.futures.process"})


@functools.cache
def _imports(path: Path) -> frozenset[str]:
    """The modules a file imports (absolute names; ``from a import b`` counts as ``a`` and ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


@functools.cache
def starts_processes(path: Path) -> bool:
    """Whether a test module (or a module of ``tests/support`` it imports, at any depth) starts processes."""
    names = _imports(path)
    if any(name in _STARTS_PROCESSES or name.split(".")[0] in _STARTS_PROCESSES for name in names):
        return True
    support = {name for name in names if name.startswith("tests.support.")}
    for name in support:
        module = TESTS.parent / (name.replace(".", "/") + ".py")
        if module.is_file() and module != path and starts_processes(module):
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of a module that starts processes (a server, a torch_xla or JAX job, a browser, an
    emulator, the CLI: found from its imports) is marked ``e2e``: the fast lane, ``./scripts/test --fast``
    (``-m "not e2e and not slow"``), runs the rest."""
    for item in items:
        if starts_processes(Path(item.path)):
            item.add_marker(pytest.mark.e2e)


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
