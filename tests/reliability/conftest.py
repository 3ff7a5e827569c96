"""Fixtures of the reliability suite: deployments (as in tests/production) and fast server restarts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.deployment import deployment  # noqa: F401 - fixture
from tests.support.gcs_emulator import create_bucket, run_fake_gcs


@pytest.fixture
def fake_gcs_endpoint() -> Iterator[str]:
    """An emulator of the test's own (the ``deployment`` fixture asks for it by this name).

    The crash tests leave thousands of objects behind; this emulator goes away whole, in memory and all,
    instead of having them deleted one request at a time from the session's shared one.
    """
    with run_fake_gcs() as endpoint:
        yield endpoint


@pytest.fixture
def gcs_bucket(fake_gcs_endpoint: str) -> str:
    """A bucket in the test's own emulator, which takes it along when it stops."""
    return create_bucket(fake_gcs_endpoint)


@pytest.fixture(scope="session")
def server_env(shared_bytecode: Path) -> dict[str, str]:
    """Variables for the server processes of this suite: the session's one bytecode cache.

    This suite starts ``xla-cache-server serve`` some thirty times; each start after the first one imports
    FastAPI, SQLAlchemy and the rest from bytecode instead of compiling them again (about two seconds of CPU
    per process; see ``shared_bytecode`` in tests/conftest.py, which sets these for every process).
    """
    return {
        "PYTHONDONTWRITEBYTECODE": "",  # empty is unset, for Python
        "PYTHONPYCACHEPREFIX": str(shared_bytecode),
    }
