"""Fixtures of the auto-activation tests: an interpreter that starts the package's hook as an installed one
does (:func:`tests.support.auto_jobs.hook_interpreter`), a real server, and each job's environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.auto_jobs import hook_interpreter
from tests.support.server import LiveServer, run_server


@pytest.fixture(scope="session")
def hook_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python (with pip) whose site-packages holds the hook as a wheel installs it."""
    return hook_interpreter(tmp_path_factory.mktemp("hook-venv") / "venv", with_pip=True)


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real server for the module (each test uses its own cache directories)."""
    with run_server(tmp_path_factory.mktemp("auto-server")) as server:
        yield server
