"""What the client tests share (tests/client, and the reliability tests that run ``warm()``): a fixed set
of runtime facts, the real server app as the client sees it (:class:`RealServer`, made by the
``real_server`` fixture of tests/client/conftest.py), a torch_xla adapter faked, and readers of what the
client logged and uploaded."""

from __future__ import annotations

import io
import logging
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zstandard
from fastapi.testclient import TestClient

from cache_protocol.signing import Signer
from tests.support.api import put_ok
from tests.support.asgi_transport import PortalASGITransport
from tests.support.http_stub import Recorded
from xla_cache.config import Compression
from xla_cache.errors import CacheAlreadyInitialized
from xla_cache.frameworks.torch_xla import TorchXla
from xla_cache.http.api import CacheApi
from xla_cache.localcache.cachedir import LocalFile
from xla_cache.transfer.uploader import Uploader

__all__ = [
    "FACTS",
    "UPLOAD_NAMESPACE",
    "FakeTorchXla",
    "RealServer",
    "make_uploader",
    "tar_members",
    "warnings_of",
]

UPLOAD_NAMESPACE = "cpu-tx2.7.0-test"

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

    def api(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        signer: Signer | None = None,
        compression: Compression | None = None,
    ) -> CacheApi:
        """A client API to this app (``CacheApi``'s own arguments; closed at the end of the test)."""
        api = CacheApi(
            server or self.url, token, transport=self.transport, signer=signer, compression=compression
        )
        self._apis.append(api)
        return api

    def put(self, namespace: str, key: str, data: bytes) -> None:
        """Store an entry, as another job would have uploaded it."""
        put_ok(self.http, namespace, key, data, created=True)

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


def tar_members(body: bytes) -> list[tarfile.TarInfo]:
    """The members of a bulk upload's (zstd-compressed) tar stream."""
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)) as plain:
        data = plain.read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        return tar.getmembers()


def make_uploader(api: CacheApi, directory: Path, **kwargs: object) -> Uploader:
    """An uploader of ``directory`` into :data:`UPLOAD_NAMESPACE`, quick to settle and to give up, with
    torch_xla faked; ``kwargs`` replace its options."""
    options: dict[str, object] = {
        "interval": 0.05,
        "settle": 0.0,
        "timeout": 2.0,
        "framework": FakeTorchXla(),
        "fingerprint": {"spmd": False},
    }
    options.update(kwargs)
    return Uploader(api, UPLOAD_NAMESPACE, directory, **options)  # type: ignore[arg-type]
