"""End-to-end fixtures: a real ``xla-cache-server`` process and real torch_xla jobs as subprocesses.

torch_xla is required. Without it these tests are skipped on a developer machine, but FAIL when the ``CI``
variable is set: CI installs torch 2.7 and torch_xla 2.7 with the project's own ``scripts/test``, so a missing
torch_xla there is a broken setup, not a reason to pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cache_protocol.signing import Signer
from tests.support.needs import require_module
from tests.support.server import LiveServer, run_server
from tests.support.torch_xla_jobs import FIRST_JOB_SHAPES, JobResult, run_job


def _require_torch_xla() -> None:
    require_module(
        "torch_xla",
        "torch_xla is not installed: the end-to-end tests need torch==2.7.0 and torch_xla==2.7.0 "
        "(scripts/test installs them)",
    )


@pytest.fixture(autouse=True)
def _torch_xla_present() -> None:
    _require_torch_xla()


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real server for the whole end-to-end session (each test uses its own namespace or data)."""
    _require_torch_xla()
    with run_server(tmp_path_factory.mktemp("e2e-server")) as server:
        yield server


@pytest.fixture(scope="session")
def uploader_key() -> Signer:
    """The key job 1 signs its uploads with (``XLA_CACHE_SIGNING_KEY``)."""
    return Signer.generate()


@pytest.fixture(scope="session")
def first_job(
    live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory, uploader_key: Signer
) -> tuple[JobResult, Path]:
    """Job 1: an empty cache directory, one graph per shape, everything uploaded, signed with
    :func:`uploader_key`. Shared by the tests that need a server holding real entries (and reference
    outputs)."""
    cache = tmp_path_factory.mktemp("job1-cache")
    result = run_job(
        ["--server", live_server.url, "--cache-dir", str(cache), "--shapes", str(FIRST_JOB_SHAPES)],
        {"XLA_CACHE_SIGNING_KEY": uploader_key.private_text()},
    )
    return result, cache
