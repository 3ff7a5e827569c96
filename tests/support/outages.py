"""What the outage tests share (tests/production/test_outages.py, tests/reliability/test_stalls.py): two
entries to store and read back, the 503 an outage answers, and waiting for the server to be ready again."""

from __future__ import annotations

import os

import httpx

from tests.support.api import entry_url, put
from tests.support.wait import wait_until

__all__ = [
    "DATA",
    "ENTRY",
    "KEYS",
    "NAMESPACE",
    "OTHER",
    "assert_unavailable",
    "put_both",
    "put_new",
    "wait_ready",
]

DATA = os.urandom(100_000)
NAMESPACE = "ns"
KEYS = ("1234", "4321")  # ENTRY's and OTHER's
ENTRY = entry_url(NAMESPACE, KEYS[0])
# Read after each outage to see the server recover. Not ENTRY: an entry read a moment ago is answered from
# the server's memory without the index or the store (XLA_CACHE_HOT_CACHE_SECONDS), and ENTRY is the one
# each outage must find cold.
OTHER = entry_url(NAMESPACE, KEYS[1])


def put_both(api: httpx.Client) -> None:
    for key in KEYS:
        assert put(api, NAMESPACE, key, DATA).status_code == 201


def assert_unavailable(response: httpx.Response, code: str) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["retry-after"] == "5"
    body = response.json()
    assert body["error"] == code
    assert body["detail"].endswith(".") and "Traceback" not in body["detail"]


def wait_ready(api: httpx.Client) -> None:
    wait_until(
        lambda: api.get("/readyz").status_code == 200,
        timeout=30,
        interval=0.2,
        message="the server did not become ready again by itself",
    )


def put_new(api: httpx.Client, key: str) -> httpx.Response:
    return put(api, NAMESPACE, key, key.encode() * 1000)
