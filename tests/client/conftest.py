"""Fixtures of the client tests: the real server app in process, a fake server for failures, a fixed
fingerprint, and a clean uploader state.

``real_server`` is what the client is checked against for ordinary behaviour: the app
``cache_server.app.create_app`` builds, lifespan and all, reached in process through an httpx transport
(no port, no second process). ``fake_server`` (:mod:`tests.support.fake_server`) stays for what the real app
does not do on demand: hang, answer 5xx, send a corrupt or garbage bundle.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cache_server.app import create_app
from cache_server.settings import Settings
from tests.support.asgi_transport import PortalASGITransport
from tests.support.client_kit import FACTS, FakeTorchXla, RealServer
from tests.support.fake_server import FakeCacheServer
from tests.support.migrated import migrated
from xla_cache import warming as warm_module
from xla_cache.frameworks import all_frameworks
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.frameworks.torch_xla import build_fingerprint
from xla_cache.runs import process as process_module


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


@pytest.fixture
def server_settings() -> dict[str, Any]:
    """Settings of ``real_server`` beyond its defaults (a test module overrides this fixture)."""
    return {}


@pytest.fixture
def real_server(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, server_settings: dict[str, Any]
) -> Iterator[RealServer]:
    """The server app on its embedded defaults (SQLite, local blobs; ``server_settings`` on top), its
    lifespan running, in process.

    ``warm()`` in the test reaches it too: the ``CacheApi`` warm builds gets this app's transport.
    """
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("server") / "data", access_flush_seconds=60.0, **server_settings
    )
    migrated(settings)
    app = create_app(settings)
    with TestClient(app) as http:
        assert http.portal is not None  # the event loop the lifespan runs on; requests go to the same one
        server = RealServer(str(http.base_url).rstrip("/"), PortalASGITransport(app, http.portal), http)
        monkeypatch.setattr(warm_module, "CacheApi", server.api)
        try:
            yield server
        finally:
            _stop_warm_state()  # no uploader thread may call into the app once it has stopped
            server.close()


def _stop_warm_state() -> None:
    process_module.stop(flush=False)


@pytest.fixture(autouse=True)
def _no_uploader_left() -> Iterator[None]:
    """Each test starts and ends without a background uploader from warm()."""
    yield
    _stop_warm_state()


@pytest.fixture
def fake_torch_xla(monkeypatch: pytest.MonkeyPatch) -> FakeTorchXla:
    """The torch_xla adapter, faked: warm(), the uploader and the CLI get it for ``torch_xla``."""
    fake = FakeTorchXla()
    monkeypatch.setitem(all_frameworks(), "torch_xla", fake)
    return fake
