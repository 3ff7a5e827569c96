"""Fixtures of the client tests: the real server app in process, a fake server for failures, a fixed
fingerprint, and a clean uploader state.

``real_server`` is what the client is checked against for ordinary behaviour: the app
``cache_server.app.create_app`` builds, lifespan and all, reached in process through an httpx transport
(no port, no second process). ``fake_server`` (:mod:`tests.client.fakes`) stays for what the real app does
not do on demand: hang, answer 5xx, send a corrupt or garbage bundle.
"""

from __future__ import annotations

import io
import logging
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zstandard
from fastapi.testclient import TestClient

from cache_protocol import SHA256_HEADER
from cache_server.app import create_app
from cache_server.migrate import upgrade
from cache_server.settings import Settings
from client import warming as warm_module
from client.api import CacheApi
from client.cachedir import LocalFile
from client.errors import CacheAlreadyInitialized
from client.fingerprint import namespace_id
from client.frameworks import all_frameworks
from client.frameworks.torch_xla import TorchXla, build_fingerprint
from tests.client.fakes import FakeCacheServer, sha
from tests.support.asgi_transport import PortalASGITransport
from tests.support.http_stub import Recorded

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


@dataclass
class RealServer:
    """The real app, reached by the client through :attr:`transport`, and looked into over its HTTP API.

    :attr:`requests` are the client's requests only (in order); :attr:`http` (the app's ``TestClient``) is
    for the test's own calls, which are not recorded.
    """

    url: str
    transport: PortalASGITransport
    http: TestClient
    _apis: list[CacheApi] = field(default_factory=list)

    @property
    def requests(self) -> list[Recorded]:
        return self.transport.requests

    def paths(self, method: str | None = None) -> list[str]:
        return [r.path for r in self.requests if method is None or r.method == method]

    def api(self, server: str | None = None, token: str | None = None) -> CacheApi:
        """A client API to this app (``CacheApi``'s own arguments; closed at the end of the test)."""
        api = CacheApi(server or self.url, token, transport=self.transport)
        self._apis.append(api)
        return api

    def put(self, namespace: str, key: str, data: bytes) -> None:
        """Store an entry, as another job would have uploaded it."""
        url = f"/v1/namespaces/{namespace}/entries/{key}"
        response = self.http.put(url, content=data, headers={SHA256_HEADER: sha(data)})
        assert response.status_code == 201, response.text

    def has(self, namespace: str, key: str) -> bool:
        """Whether the entry is stored (HEAD: not counted as a hit or a miss)."""
        return self.http.head(f"/v1/namespaces/{namespace}/entries/{key}").status_code == 200

    def entry(self, namespace: str, key: str) -> bytes | None:
        """The stored bytes of an entry, or None if the server does not have it."""
        response = self.http.get(f"/v1/namespaces/{namespace}/entries/{key}")
        if response.status_code == 404:
            return None
        assert response.status_code == 200, response.text
        return response.content

    def namespace(self, namespace: str) -> dict[str, Any]:
        """``GET /v1/namespaces/{ns}``: the fingerprint it was registered with, entries, bytes."""
        response = self.http.get(f"/v1/namespaces/{namespace}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def close(self) -> None:
        for api in self._apis:
            api.close()


@pytest.fixture
def real_server(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RealServer]:
    """The server app on its embedded defaults (SQLite, local blobs), its lifespan running, in process.

    ``warm()`` in the test reaches it too: the ``CacheApi`` warm builds gets this app's transport.
    """
    settings = Settings(data_dir=tmp_path_factory.mktemp("server") / "data", access_flush_seconds=60.0)
    upgrade(settings)
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
    warm_module.stop(flush=False)


@pytest.fixture(autouse=True)
def _no_uploader_left() -> Iterator[None]:
    """Each test starts and ends without a background uploader from warm()."""
    yield
    _stop_warm_state()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "xla_cache" and r.levelno >= logging.WARNING]


class FakeTorchXla(TorchXla):
    """torch_xla present and not yet compiling, as far as warm() and the uploader can tell."""

    def __init__(self) -> None:
        self.initialized: list[str] = []  # the directories the cache was pointed at
        self.too_late = False
        self.spmd: bool | None = None  # SPMD now (None: torch_xla not loaded)
        self.failures = 0  # PersistentCacheDeserializeFailure
        self.version: str | None = "2.7.0"

    def require(self) -> None:
        return None

    def check_not_too_late(self, directory: Path | None = None) -> None:
        if self.too_late:
            raise CacheAlreadyInitialized("torch_xla already compiled a graph in this process")

    def initialize(self, directory: Path, *, all_compilations: bool = True) -> None:
        self.initialized.append(str(directory))

    def compile_times(self, files: Sequence[LocalFile]) -> dict[str, int]:
        return {}

    def spmd_now(self) -> bool | None:
        return self.spmd

    def loaded_version(self) -> str | None:
        return self.version

    def load_failures(self) -> int:
        return self.failures


@pytest.fixture
def fake_torch_xla(monkeypatch: pytest.MonkeyPatch) -> FakeTorchXla:
    """The torch_xla adapter, faked: warm(), the uploader and the CLI get it for ``torch_xla``."""
    fake = FakeTorchXla()
    monkeypatch.setitem(all_frameworks(), "torch_xla", fake)
    return fake


def tar_members(body: bytes) -> list[tarfile.TarInfo]:
    """The members of a bulk upload's (zstd-compressed) tar stream."""
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)) as plain:
        data = plain.read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        return tar.getmembers()
