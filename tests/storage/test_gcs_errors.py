"""GCS error translation: a miss is None, transient failures are retried, the rest is StorageUnavailable."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from cache_server.errors import StorageUnavailable
from cache_server.storage.gcs import GcsBlobStore
from tests.support.gcs_emulator import object_names
from tests.support.http_stub import Recorded, Reply, StubHttpServer, json_reply
from tests.support.memory import MIB
from tests.support.server import free_port


def fast_store(endpoint: str, retries: int = 2) -> GcsBlobStore:
    return GcsBlobStore("my-bucket", "p", endpoint=endpoint, retries=retries, backoff=0.01, max_backoff=0.02)


def blocks(count: int) -> Iterator[bytes]:
    for i in range(count):
        yield bytes([i]) * MIB


def operations(store: GcsBlobStore) -> dict[str, Callable[[], object]]:
    return {
        "put small": lambda: store.put("ns/k", [b"x" * 1000], {"a": "b"}),
        "put large": lambda: store.put("ns/k", blocks(10), {}),
        "stat": lambda: store.stat("ns/k"),
        "open": lambda: store.open("ns/k"),
        "delete": lambda: store.delete("ns/k"),
        "list": lambda: list(store.list("ns/")),
        "check": store.check,
    }


def error_reply(status: int) -> Reply:
    return json_reply(status, {"error": {"code": status, "message": "injected"}})


@pytest.mark.parametrize("status", [503, 429, 500])
def test_failing_service_gives_storage_unavailable_after_the_retries(status: int) -> None:
    with StubHttpServer(lambda request: error_reply(status)) as stub:
        store = fast_store(stub.url, retries=2)
        started = time.monotonic()
        for label, operation in operations(store).items():
            before = len(stub.requests)
            with pytest.raises(StorageUnavailable) as caught:
                operation()
            message = str(caught.value)
            assert "'my-bucket'" in message, label
            if label == "check":  # readiness makes one short attempt, not the whole retry policy
                assert f"it failed (HTTP {status}" in message
                assert len(stub.requests) - before == 1
                continue
            assert f"after 3 attempts (HTTP {status}" in message, label
            assert len(stub.requests) - before == 3, f"{label}: one try and two retries"
        assert time.monotonic() - started < 10
        store.close()


def test_unreachable_endpoint_gives_storage_unavailable_quickly() -> None:
    store = fast_store(f"http://127.0.0.1:{free_port()}", retries=1)
    started = time.monotonic()
    for label, operation in operations(store).items():
        expected = r"'my-bucket'.*it failed" if label == "check" else r"'my-bucket'.*after 2 attempts"
        with pytest.raises(StorageUnavailable, match=expected):
            operation()
        assert label
    assert time.monotonic() - started < 10


def object_json(name: str, size: int, generation: int = 7) -> dict[str, object]:
    return {
        "kind": "storage#object",
        "bucket": "my-bucket",
        "name": name,
        "size": str(size),
        "generation": str(generation),
        "timeCreated": "2026-01-02T03:04:05.678Z",
        "metadata": {"sha256": "abc"},
    }


def test_transient_errors_are_retried_until_they_pass() -> None:
    def answer(request: Recorded) -> Reply:
        if len(stub.requests) <= 2:
            return error_reply(503)
        return json_reply(200, object_json("p/ns/k", 42))

    with StubHttpServer(answer) as stub:
        info = fast_store(stub.url, retries=2).stat("ns/k")
    assert info is not None
    assert (info.name, info.size, dict(info.metadata)) == ("ns/k", 42, {"sha256": "abc"})
    assert info.created.isoformat() == "2026-01-02T03:04:05.678000+00:00"
    assert [r.path for r in stub.requests] == ["/storage/v1/b/my-bucket/o/p/ns/k"] * 3


def test_refused_access_is_not_retried() -> None:
    with (
        StubHttpServer(lambda request: error_reply(403)) as stub,
        pytest.raises(StorageUnavailable, match=r"'my-bucket'.*access was refused"),
    ):
        fast_store(stub.url, retries=3).put("ns/k", [b"x"], {})
    assert len(stub.requests) == 1


def test_a_missing_bucket_fails_check_and_put(fake_gcs_endpoint: str) -> None:
    store = GcsBlobStore("no-such-bucket", endpoint=fake_gcs_endpoint, retries=0)
    with pytest.raises(StorageUnavailable, match="'no-such-bucket': the bucket does not exist"):
        store.check()
    with pytest.raises(StorageUnavailable, match="'no-such-bucket'"):
        store.put("ns/k", [b"x"], {})
    with pytest.raises(StorageUnavailable, match="'no-such-bucket'"):
        list(store.list())
    store.close()


def test_check_passes_on_a_reachable_bucket(fake_gcs_endpoint: str, gcs_bucket: str) -> None:
    store = GcsBlobStore(gcs_bucket, "some/prefix", endpoint=fake_gcs_endpoint)
    store.check()
    assert object_names(fake_gcs_endpoint, gcs_bucket) == []
    store.close()
