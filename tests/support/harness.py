"""What the reliability cases share: a server of a deployment that can be killed and started again on the
same data, a look into its blob store from outside, and the checks that the index and the store agree."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

from cache_protocol import SHA256_HEADER
from cache_server.index.migrate import upgrade
from tests.support.deployment import Deployment
from tests.support.gcs_emulator import object_names
from tests.support.process_tree import kill_tree
from tests.support.server import LiveServer, run_server

__all__ = ["MIB", "BlobView", "Crashable", "IndexView"]

MIB = 1024 * 1024
GCS_PREFIX = "cache"  # the object prefix of the deployment's gs:// URL (tests/support/deployment.py)


@dataclass
class BlobView:
    """A deployment's blob store seen from outside the server: a directory, or a bucket on the emulator."""

    deployment: Deployment

    @property
    def root(self) -> Path:
        """The local store's directory."""
        parsed = urlparse(self.deployment.storage_url)
        assert parsed.scheme == "file", self.deployment.storage_url
        return Path(parsed.path)

    @property
    def is_local(self) -> bool:
        return self.deployment.storage == "local"

    def names(self, namespace: str | None = None) -> set[str]:
        """Every stored blob, as ``namespace/key`` (of one namespace when given)."""
        if self.is_local:
            found: set[str] = set()
            if self.root.is_dir():
                for ns_dir in self.root.iterdir():
                    if ns_dir.name == ".tmp" or (namespace is not None and ns_dir.name != namespace):
                        continue
                    found.update(f"{ns_dir.name}/{path.name}" for path in ns_dir.iterdir())
            return found
        endpoint = self.deployment.extra_env["STORAGE_EMULATOR_HOST"]
        bucket = urlparse(self.deployment.storage_url).netloc
        prefix = f"{GCS_PREFIX}/" + (f"{namespace}/" if namespace else "")
        return {
            name[len(GCS_PREFIX) + 1 :] for name in object_names(endpoint, bucket) if name.startswith(prefix)
        }

    def count(self, namespace: str) -> int:
        """How many blobs one namespace has (cheap enough to poll on a local store)."""
        if self.is_local:
            try:
                with os.scandir(self.root / namespace) as entries:
                    return sum(1 for _ in entries)
            except FileNotFoundError:
                return 0
        return len(self.names(namespace))

    def temp_files(self) -> list[Path]:
        """Upload temp files in the local store (a GCS upload in progress is no object at all)."""
        if not self.is_local or not (self.root / ".tmp").is_dir():
            return []
        return sorted((self.root / ".tmp").iterdir())

    def age_temp_files(self, seconds: float) -> int:
        """Make the temp files look ``seconds`` old (gc keeps younger ones); returns how many there are."""
        files = self.temp_files()
        past = time.time() - seconds
        for path in files:
            os.utime(path, (past, past))
        return len(files)


@dataclass
class IndexView:
    """What a server says its index holds, through the HTTP API."""

    api: httpx.Client

    def rows(self, namespace: str) -> dict[str, str]:
        """The namespace's entries, key -> SHA-256 (the whole manifest)."""
        response = self.api.get(f"/v1/namespaces/{namespace}/manifest")
        assert response.status_code == 200, response.text
        return {entry["key"]: entry["sha256"] for entry in response.json()["entries"]}

    def read(self, namespace: str, keys: list[str], workers: int = 4) -> dict[str, tuple[int, str | None]]:
        """GET each entry: its status and, for a 200, the SHA-256 of the bytes that came (whole or not)."""

        def get(key: str) -> tuple[str, tuple[int, str | None]]:
            digest = hashlib.sha256()
            try:
                with self.api.stream("GET", f"/v1/namespaces/{namespace}/entries/{key}") as response:
                    if response.status_code != 200:
                        response.read()
                        return key, (response.status_code, None)
                    for chunk in response.iter_bytes():
                        digest.update(chunk)
                    announced = response.headers[SHA256_HEADER]
            except httpx.TransportError:  # a transfer the server broke off: its bytes never count as read
                return key, (-1, None)
            assert announced == digest.hexdigest(), f"{key}: announced {announced}, sent other bytes"
            return key, (200, digest.hexdigest())

        with ThreadPoolExecutor(workers) as pool:
            return dict(pool.map(get, keys))

    def gc(self) -> dict[str, Any]:
        """``POST /admin/gc`` with no grace period: every blob without a row is an orphan now."""
        response = self.api.post("/admin/gc", json={"grace_seconds": 0})
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result


@dataclass
class Crashable:
    """``xla-cache-server serve`` on one deployment's data, started again after each kill."""

    deployment: Deployment
    data_dir: Path
    env: dict[str, str]
    workers: int = 1
    starts: int = 0
    kills: list[int] = field(default_factory=list)  # processes killed each time

    def migrate(self) -> None:
        """A shared database is migrated once by the operator (``serve`` migrates only SQLite files)."""
        if self.deployment.database != "sqlite":
            upgrade(self.deployment.settings(self.data_dir / "migrate"))

    @contextmanager
    def running(self) -> Iterator[tuple[LiveServer, httpx.Client]]:
        """A server on the data, and a client of it (the server is stopped afterwards if still alive)."""
        self.starts += 1
        with (
            run_server(self.data_dir, self.deployment.env(**self.env), workers=self.workers) as server,
            httpx.Client(base_url=server.url, timeout=60) as api,
        ):
            yield server, api

    def kill(self, server: LiveServer) -> None:
        """SIGKILL the server and all its workers at one instant."""
        killed = kill_tree(server.pid)
        server.process.wait(timeout=30)
        self.kills.append(len(killed))
