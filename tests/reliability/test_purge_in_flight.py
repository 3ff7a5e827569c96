"""Purge and revoke take effect inside uploads already in flight, against a real ``serve`` process.

A namespace-scoped write token streams a bulk upload that pauses (a generator waiting on an event) after
its first group of members has been committed; an admin purges the token meanwhile; then the stream goes
on. Nothing the token stored may remain, nothing sent after the purge may be stored, the feed may announce
none of it, and the stream ends with the documented ``401 token_revoked``. The same for a single ``PUT``
whose body is still arriving when the purge comes (its row is written, found revoked and taken back).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cache_protocol.tar import END
from cache_server.auth.tokens import Role
from cache_server.service.bulk import GROUP_ENTRIES
from cache_server.settings import Settings
from cache_server.wiring import build_services
from tests.support.api import bearer, entry_url, put_at, stream_member
from tests.support.migrated import migrated
from tests.support.server import LiveServer, run_server
from tests.support.wait import wait_until

NS = "team-a"
BEFORE = 1000  # members sent before the pause: the first group (512) is committed meanwhile
AFTER = 200  # members sent after the purge


@dataclass
class Deployment:
    server: LiveServer
    data_dir: Path
    admin: dict[str, str]  # the admin's headers
    writers: dict[str, str]  # a namespace-scoped write token per name


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, server_env: dict[str, str]) -> Iterator[Deployment]:
    """One server with auth on, an admin token and a write token (limited to team-*) per test."""
    data_dir = tmp_path_factory.mktemp("purge")
    settings = Settings(data_dir=data_dir)
    migrated(settings)
    services = build_services(settings)
    try:
        admin, _ = services.tokens.create("ops", Role.ADMIN)
        writers = {name: services.tokens.create(name, Role.WRITE, ["team-*"])[0] for name in ("bulk", "put")}
    finally:
        services.stop()
    with run_server(data_dir, {**server_env, "XLA_CACHE_AUTH": "on"}) as server:
        yield Deployment(server, data_dir, bearer(admin), writers)


def data_of(index: int) -> bytes:
    return hashlib.sha256(str(index).encode()).digest() * 128  # 4 KiB, different for each member


def members(first: int, count: int) -> Iterator[bytes]:
    for index in range(first, first + count):
        data = data_of(index)
        yield stream_member(f"k{index:05d}", data)


class Background:
    """One request sent from a thread of its own (its body waits for the test), and its answer."""

    def __init__(self, send: Callable[[], httpx.Response]) -> None:
        self._answers: list[httpx.Response] = []
        self._thread = threading.Thread(target=lambda: self._answers.append(send()))
        self._thread.start()

    def answer(self) -> httpx.Response:
        self._thread.join(60)
        return self._answers[0]


def test_a_purge_mid_stream_stops_the_upload_and_leaves_nothing_of_the_token(deployment: Deployment) -> None:
    server, as_admin = deployment.server, deployment.admin
    writer = bearer(deployment.writers["bulk"])
    base = f"/v1/namespaces/{NS}-bulk"
    resume = threading.Event()

    def body() -> Iterator[bytes]:
        yield from members(0, BEFORE)
        assert resume.wait(60), "the test never resumed the stream"
        yield from members(BEFORE, AFTER)
        yield END

    with httpx.Client(base_url=server.url, timeout=60) as http:
        assert http.put(base, json={}, headers=as_admin).status_code == 201
        cursor = http.get(f"{base}/feed", params={"wait": 0}, headers=as_admin).json()["cursor"]
        upload = Background(
            lambda: httpx.post(f"{server.url}{base}/entries", content=body(), headers=writer, timeout=60)
        )

        def committed() -> int:
            return len(http.get(f"{base}/manifest", headers=as_admin).json()["entries"])

        wait_until(lambda: committed() >= GROUP_ENTRIES, timeout=60, message=server.log)
        blobs = deployment.data_dir / "blobs" / f"{NS}-bulk"
        assert len(list(blobs.glob("k*"))) >= GROUP_ENTRIES
        purged = http.post("/admin/tokens/bulk/purge", headers=as_admin).json()
        resume.set()
        answer = upload.answer()
        print(
            f"\nbulk upload purged mid-stream: {GROUP_ENTRIES} committed before the purge, purge removed "
            f"{purged['removed']['evicted']}, stream answered {answer.status_code} {answer.json()['error']} "
            f"after {BEFORE + AFTER} members sent; entries left: {committed()}"
        )
        assert purged["removed"]["evicted"] == GROUP_ENTRIES and len(purged["revoked"]) == 1
        assert answer.status_code == 401
        assert answer.json()["error"] == "token_revoked"
        assert "revoked while the upload was in flight" in answer.json()["detail"]
        assert committed() == 0
        for index in (0, GROUP_ENTRIES - 1, GROUP_ENTRIES, BEFORE, BEFORE + AFTER - 1):
            assert http.get(f"{base}/entries/k{index:05d}", headers=as_admin).status_code == 404
        feed = http.get(f"{base}/feed", params={"after": cursor, "wait": 0}, headers=as_admin).json()
        assert feed["entries"] == []
        assert not list(blobs.glob("k*"))  # no blob left behind either
        assert http.post(f"{base}/entries", content=END, headers=writer).status_code == 401  # no new stream


def test_a_purge_while_a_put_body_arrives_takes_the_entry_back(deployment: Deployment) -> None:
    server, as_admin = deployment.server, deployment.admin
    data = b"x" * (4 * 1024 * 1024)
    writer = bearer(deployment.writers["put"])
    url = entry_url(f"{NS}-put", "late")
    half, resume = threading.Event(), threading.Event()

    def body() -> Iterator[bytes]:
        yield data[: len(data) // 2]
        half.set()
        assert resume.wait(60), "the test never resumed the body"
        yield data[len(data) // 2 :]

    with httpx.Client(base_url=server.url, timeout=60) as http:
        upload = Background(lambda: put_at(server.url, f"{NS}-put", "late", data, body=body(), **writer))
        assert half.wait(60)

        def authenticated() -> bool:  # the token's first use: the server is past the PUT's headers
            usage = http.get("/admin/tokens", headers=as_admin).json()["tokens"]
            tokens = [row["token"] for row in usage if row["token"]]
            return any(token["name"] == "put" and token["last_used_at"] for token in tokens)

        # The first half can sit in the socket's buffers before the server reads the headers; a purge then
        # would refuse the token at the door (plain 401 unauthorized), not in flight.
        wait_until(authenticated, timeout=60, message=server.log)
        purged = http.post("/admin/tokens/put/purge", headers=as_admin).json()
        resume.set()
        answer = upload.answer()
        print(
            f"\nPUT purged mid-body: purge removed {purged['removed']['evicted']}, "
            f"PUT answered {answer.status_code}"
        )
        assert purged["removed"]["evicted"] == 0  # nothing was stored yet when the purge looked
        assert answer.status_code == 401 and answer.json()["error"] == "token_revoked"
        assert http.get(url, headers=as_admin).status_code == 404
        assert not (deployment.data_dir / "blobs" / f"{NS}-put" / "late").exists()
