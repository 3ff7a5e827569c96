"""Fixtures of the client tests: a fake server, a fixed fingerprint, and a clean uploader state."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from client import warming as warm_module
from client.fingerprint import build_fingerprint, namespace_id
from tests.client.fakes import FakeCacheServer

FACTS: dict[str, Any] = {
    "torch_xla_version": "2.7.0",
    "torch_xla_git": "d5871fc442222a96fbdf45229c4408c63740b782",
    "torch_version": "2.7.0+cu126",
    "torch_git": "134179474539648ba7dee1317959529fbd0e7f89",
    "jax_version": None,
    "jaxlib_version": None,
    "device_type": "CPU",
    "device_kind": "cpu",
    "global_device_count": 1,
    "process_count": 1,
    "spmd": False,
    "process_index": 0,
    "pjrt_plugins": {},
}


@pytest.fixture
def fingerprint() -> dict[str, Any]:
    return build_fingerprint(FACTS, env={})


@pytest.fixture
def namespace(fingerprint: dict[str, Any]) -> str:
    return namespace_id(fingerprint)


@pytest.fixture
def fake_server() -> Iterator[FakeCacheServer]:
    with FakeCacheServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _no_uploader_left() -> Iterator[None]:
    """Each test starts and ends without a background uploader from warm()."""
    yield
    uploader = warm_module._State.uploader
    if uploader is not None:
        uploader.stop()
    warm_module._State.uploader = None
    warm_module._State.api = None
    warm_module._State.initialized = None


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "xla_cache" and r.levelno >= logging.WARNING]
