"""The bounds a hostile client meets, in process: JSON body size, upload slots, and their error answers."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient

from cache_protocol import KEY_MAX_LENGTH, MAX_KEYS_PER_REQUEST, SHA256_HEADER
from cache_server.api.bodies import UploadSlots
from cache_server.api.errors import cache_error_response
from cache_server.app import create_app
from cache_server.errors import BodyTimeout, BodyTooLarge, ClientAborted, UploadsBusy
from cache_server.settings import Settings
from cache_server.wiring import build_services
from tests.support.api import sha
from tests.support.migrated import migrated

LIMIT = 4096


@pytest.fixture
def small_limit(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0, max_json_bytes=LIMIT)
    migrated(settings)
    services = build_services(settings)
    try:
        with TestClient(create_app(settings, services)) as client:
            yield client
    finally:
        services.stop()


def keys_body(count: int, length: int) -> bytes:
    return json.dumps({"keys": [f"{i:0{length}d}" for i in range(count)]}).encode()


def test_defaults() -> None:
    settings = Settings()
    assert settings.max_json_bytes == 4 * 1024 * 1024
    assert settings.max_concurrent_uploads == 16
    assert settings.upload_wait_seconds == 10
    assert settings.body_timeout_seconds == 30


def test_json_body_over_the_limit_is_413_declared_or_chunked(small_limit: TestClient) -> None:
    body = keys_body(40, 200)
    assert len(body) > LIMIT
    declared = small_limit.post(
        "/v1/namespaces/ns/missing", content=body, headers={"Content-Type": "application/json"}
    )
    assert declared.status_code == 413
    assert declared.json() == {
        "error": "body_too_large",
        "detail": f"The request body is {len(body)} bytes long; request bodies other than entry uploads may "
        f"be at most {LIMIT} bytes (XLA_CACHE_MAX_JSON_BYTES).",
    }
    chunked = small_limit.post(
        "/v1/namespaces/ns/bundle",
        content=(body[i : i + 1000] for i in range(0, len(body), 1000)),
        headers={"Content-Type": "application/json"},
    )
    assert chunked.status_code == 413
    assert chunked.json()["error"] == "body_too_large"
    assert f"longer than {LIMIT} bytes" in chunked.json()["detail"]
    fingerprint = {"fingerprint": {"blob": "x" * LIMIT}}
    assert small_limit.put("/v1/namespaces/ns", json=fingerprint).status_code == 413
    assert small_limit.post("/admin/evict", content=b" " * (LIMIT + 1)).status_code == 413


def test_bodies_within_the_limit_reach_the_routes_unchanged(small_limit: TestClient) -> None:
    body = keys_body(10, 20)
    chunked = small_limit.post(
        "/v1/namespaces/ns/missing",
        content=(body[i : i + 7] for i in range(0, len(body), 7)),
        headers={"Content-Type": "application/json"},
    )
    assert chunked.status_code == 200
    assert len(chunked.json()["missing"]) == 10
    assert small_limit.post("/v1/namespaces/ns/missing", content=b"{").status_code == 400
    assert small_limit.put("/v1/namespaces/ns", json={"labels": {"a": "b"}}).status_code == 201


def test_entry_uploads_keep_their_own_limit(small_limit: TestClient) -> None:
    data = b"x" * (4 * LIMIT)
    response = small_limit.put(
        "/v1/namespaces/ns/entries/big", content=data, headers={SHA256_HEADER: sha(data)}
    )
    assert response.status_code == 201
    assert small_limit.get("/v1/namespaces/ns/entries/big").content == data


def test_the_largest_legitimate_keys_request_fits_the_default_limit(client: TestClient) -> None:
    """10,000 keys (the most one request may name) of the longest length (255 characters): about 2.6 MB."""
    body = keys_body(MAX_KEYS_PER_REQUEST, KEY_MAX_LENGTH)
    assert len(body) < Settings().max_json_bytes
    response = client.post(
        "/v1/namespaces/ns/missing", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200
    assert len(response.json()["missing"]) == MAX_KEYS_PER_REQUEST


def test_upload_slots_wait_a_bounded_time_then_refuse() -> None:
    async def scenario() -> None:
        slots = UploadSlots(2, wait_seconds=0.2)
        async with slots.slot(), slots.slot():
            assert slots.in_use == 2
            started = time.monotonic()
            with pytest.raises(UploadsBusy, match=r"All 2 upload slots stayed busy for 0\.2 s"):
                async with slots.slot():
                    pass
            assert 0.15 <= time.monotonic() - started < 2
        assert slots.in_use == 0
        # A waiter gets the slot as soon as one frees up.
        order: list[str] = []

        async def waiter() -> None:
            async with slots.slot():
                order.append("waiter")

        async with anyio.create_task_group() as group, slots.slot(), slots.slot():
            group.start_soon(waiter)
            with anyio.fail_after(5):  # until the waiter waits for a slot
                while slots._slots.statistics().tasks_waiting < 1:
                    await anyio.sleep(0)
            order.append("release")
        assert order == ["release", "waiter"]
        assert slots.in_use == 0
        # Waiting zero seconds still takes a free slot.
        async with UploadSlots(1, wait_seconds=0).slot():
            pass

    anyio.run(scenario)


@pytest.mark.parametrize(
    ("error", "status", "code", "header"),
    [
        (BodyTooLarge("too long"), 413, "body_too_large", None),
        (BodyTimeout("stalled"), 408, "body_timeout", ("connection", "close")),
        (ClientAborted("gone"), 499, "client_aborted", None),
        (UploadsBusy("busy"), 503, "uploads_busy", ("retry-after", "5")),
    ],
)
def test_the_new_errors_map_to_their_status(
    error: Exception, status: int, code: str, header: tuple[str, str] | None
) -> None:
    assert isinstance(error, BodyTooLarge | BodyTimeout | ClientAborted | UploadsBusy)
    response = cache_error_response(error)
    assert response.status_code == status
    assert json.loads(bytes(response.body)) == {"error": code, "detail": error.detail}
    if header is not None:
        assert response.headers[header[0]] == header[1]
