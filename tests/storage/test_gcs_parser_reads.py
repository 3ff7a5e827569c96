"""The server's graph parser reads each entry of a GCS store in one request (issue 45): right after a push
it reads every new entry, and each request it makes is one more beside the next warm's. Counted by a
proxy before the emulator, against the real parser child, which opens the store from its URL."""

from __future__ import annotations

import random

import pytest

from cache_server.parsing.worker import WHOLE_READ_BYTES, ParserProcess, parse_blob
from cache_server.storage import blob_name
from cache_server.storage.gcs import GcsBlobStore
from tests.support.gcs_emulator import fake_gcs_endpoint, gcs_bucket  # noqa: F401 - fixtures
from tests.support.real_entries import real_entries
from tests.support.tcp_proxy import tcp_proxy

pytestmark = pytest.mark.e2e  # starts the parser child process

COPIES = 3  # each real entry stored under this many keys


def test_the_parser_child_reads_each_entry_in_one_request(
    fake_gcs_endpoint: str,  # noqa: F811
    gcs_bucket: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host, port = fake_gcs_endpoint.removeprefix("http://").rsplit(":", 1)
    items = [(f"ns{copy}", name) for copy in range(COPIES) for name in real_entries()]
    writer = GcsBlobStore(gcs_bucket, "parsed", endpoint=fake_gcs_endpoint)
    try:
        entries = real_entries()
        for namespace, key in items:
            assert writer.put(blob_name(namespace, key), [entries[key]], {})
    finally:
        writer.close()
    with tcp_proxy(host, int(port)) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{host}:{proxy.port}")  # the child's store
        parser = ParserProcess(f"gs://{gcs_bucket}/parsed", retries=1)
        try:
            first = parser.parse(items[:1])  # starts the child (opening the store may cost requests)
            before = proxy.requests
            outcomes = first
            while len(outcomes) < len(items):  # a batch is answered in slices of the child's time
                outcomes += parser.parse(items[len(outcomes) :])
            requests = proxy.requests - before
        finally:
            parser.close()
    assert [o.error for o in outcomes] == [None] * len(items)
    assert all(o.info is not None for o in outcomes), [o.why or o.unparseable for o in outcomes]
    assert requests == len(items) - 1


def test_an_entry_over_the_whole_read_limit_is_streamed_with_two_requests(
    fake_gcs_endpoint: str,  # noqa: F811
    gcs_bucket: str,  # noqa: F811
) -> None:
    """Over :data:`WHOLE_READ_BYTES` the parser streams the entry: the whole read's GET, dropped unread,
    names the generation that is then streamed (no third request for its metadata)."""
    host, port = fake_gcs_endpoint.removeprefix("http://").rsplit(":", 1)
    data = random.Random(45).randbytes(WHOLE_READ_BYTES + 1)
    with tcp_proxy(host, int(port)) as proxy:
        store = GcsBlobStore(gcs_bucket, "large", endpoint=f"http://{host}:{proxy.port}", retries=1)
        try:
            assert store.put(blob_name("ns", "big"), [data], {"sha256": "x"})
            before = proxy.requests
            parsed = parse_blob(store, "ns", "big")
            requests = proxy.requests - before
            reader = store.read_whole(blob_name("ns", "big"), WHOLE_READ_BYTES)
            assert reader is not None
            with reader:
                assert b"".join(reader.chunks()) == data
                assert (reader.info.size, dict(reader.info.metadata)) == (len(data), {"sha256": "x"})
        finally:
            store.close()
    assert parsed.info is None and parsed.why  # random bytes: no graph, and why
    assert requests == 2
