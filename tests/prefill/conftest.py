"""Fixtures of the prefill tests: a real server for the module, and an interpreter that starts the
package's hook as an installed one does (the jobs run unmodified, with ``XLA_CACHE_AUTO=1``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.auto_jobs import hook_interpreter
from tests.support.server import LiveServer, run_server


@pytest.fixture(scope="session")
def hook_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python whose site-packages holds the hook as a wheel installs it."""
    return hook_interpreter(tmp_path_factory.mktemp("hook-venv") / "venv")


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real server for the module (each test uses its own namespace's shapes and cache directories)."""
    with run_server(tmp_path_factory.mktemp("prefill-server")) as server:
        yield server
