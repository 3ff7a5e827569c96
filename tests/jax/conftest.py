"""Fixtures of the JAX end-to-end tests: a real ``xla-cache-server`` process and real JAX jobs on the CPU.

JAX is required. Without it these tests are skipped on a developer machine, but FAIL when the ``CI`` variable
is set: ``scripts/test`` installs jax 0.10 with the rest of the test environment.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.needs import require_module
from tests.support.server import LiveServer, run_server


def _require_jax() -> None:
    require_module(
        "jax", "jax is not installed: the JAX end-to-end tests need jax 0.10 (scripts/test installs it)"
    )


@pytest.fixture(autouse=True)
def _jax_present() -> None:
    _require_jax()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real server for the module (each test uses its own cache directories)."""
    _require_jax()
    with run_server(tmp_path_factory.mktemp("jax-server")) as server:
        yield server
