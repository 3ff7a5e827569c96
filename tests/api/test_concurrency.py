"""Many uploaders of one new key at once: one blob, one row, every uploader told success."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

from cache_server.wiring import Services
from tests.support.api import sha


def test_32_concurrent_puts_of_one_key(services: Services) -> None:
    data = b"executable" * 10_000
    barrier = Barrier(32)

    def upload(_: int) -> bool:
        barrier.wait()
        chunks = (data[i : i + 4096] for i in range(0, len(data), 4096))
        return services.cache.put_entry("ns", "42", chunks, sha256=sha(data)).created

    with ThreadPoolExecutor(32) as pool:
        created = list(pool.map(upload, range(32)))
    assert created.count(True) == 1
    assert created.count(False) == 31
    blobs = list(services.store.list("ns/"))
    assert [b.name for b in blobs] == ["ns/42"]
    summary = services.cache.get_namespace("ns")
    assert summary.entries == 1 and summary.bytes == len(data)
    assert summary.counters.uploads == 1
    assert list((services.settings.data_dir / "blobs" / ".tmp").iterdir()) == []
