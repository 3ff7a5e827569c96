"""Fixtures of the reliability suite: deployments (as in tests/production) and fast server restarts."""

from __future__ import annotations

from collections.abc import Iterator

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
def server_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Variables for the server processes of this suite: one bytecode cache that they all share.

    This suite starts ``xla-cache-server serve`` some thirty times. Where ``PYTHONDONTWRITEBYTECODE`` is set
    (as in this project's containers) every start compiles FastAPI, SQLAlchemy and the rest again, about two
    seconds of CPU per process; a private ``PYTHONPYCACHEPREFIX`` (nothing is written into the environment)
    makes every start after the first one import from bytecode instead. The servers run the same code.
    """
    return {
        "PYTHONDONTWRITEBYTECODE": "",  # empty is unset, for Python
        "PYTHONPYCACHEPREFIX": str(tmp_path_factory.mktemp("pycache")),
    }
