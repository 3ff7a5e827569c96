"""The change feed: long polls that answer as soon as an entry arrives (on any replica), hold no thread."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cache_server.app import create_app
from cache_server.service.feed import FeedWatcher
from cache_server.settings import Settings
from tests.support.api import put_ok, sha
from tests.support.migrated import migrated
from tests.support.server import run_server
from tests.support.tcp_queues import read_by_server, settled
from tests.support.threaded_server import serve_in_thread
from tests.support.wait import wait_until

NAMESPACE = "ns"
NS = f"/v1/namespaces/{NAMESPACE}"


def watcher_of(client: TestClient) -> FeedWatcher:
    """The feed watcher of the app behind ``client``: its ``waiting`` counts the long polls waiting now."""
    app = client.app
    assert isinstance(app, FastAPI)
    watcher: FeedWatcher = app.state.feed_watcher
    return watcher


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    config = Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0)
    migrated(config)
    return config


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_a_follower_gets_what_was_stored_after_its_cursor(client: TestClient) -> None:
    put_ok(client, NAMESPACE, "before", b"old", created=True)
    start = client.get(f"{NS}/feed").json()
    assert start["entries"] == [] and start["cursor"] >= 1
    put_ok(client, NAMESPACE, "k1", b"one", compile_ms=700, created=True)
    answer = client.get(f"{NS}/feed", params={"after": start["cursor"], "wait": 5}).json()
    fresh = [e for e in answer["entries"] if e["seq"] > start["cursor"]]
    assert [(e["key"], e["size"], e["sha256"], e["compile_time_ms"]) for e in fresh] == [
        ("k1", 3, sha(b"one"), 700)
    ]
    assert answer["cursor"] == fresh[0]["seq"]
    # Nothing new: an empty answer after the wait, same cursor.
    started = time.monotonic()
    idle = client.get(f"{NS}/feed", params={"after": answer["cursor"], "wait": 0.3}).json()
    assert time.monotonic() - started >= 0.3
    assert idle["cursor"] == answer["cursor"]
    assert all(e["seq"] <= answer["cursor"] for e in idle["entries"])


def test_a_waiting_follower_is_answered_as_soon_as_an_entry_arrives(client: TestClient) -> None:
    cursor = client.get(f"{NS}/feed").json()["cursor"]
    answers: list[dict[str, Any]] = []
    follower = threading.Thread(
        target=lambda: answers.append(client.get(f"{NS}/feed", params={"after": cursor, "wait": 20}).json())
    )
    watcher = watcher_of(client)
    follower.start()
    wait_until(lambda: watcher.waiting == 1, timeout=10, message="the follower never waited")
    put_ok(client, NAMESPACE, "late", b"compiled elsewhere", created=True)
    stored = time.monotonic()
    follower.join(timeout=15)
    assert not follower.is_alive()
    woken = time.monotonic() - stored
    assert woken < 5  # woken, not timed out
    assert watcher.waiting == 0
    print(f"\na waiting follower was answered {woken:.3f} s after the upload (it would have waited 20 s)")
    assert [e["key"] for e in answers[0]["entries"] if e["seq"] > cursor] == ["late"]


def test_replicas_on_one_database_wake_each_others_followers(settings: Settings) -> None:
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        cursor = b.get(f"{NS}/feed").json()["cursor"]
        answers: list[dict[str, Any]] = []
        follower = threading.Thread(
            target=lambda: answers.append(b.get(f"{NS}/feed", params={"after": cursor, "wait": 20}).json())
        )
        watcher = watcher_of(b)
        follower.start()
        wait_until(lambda: watcher.waiting == 1, timeout=10, message="the follower on b never waited")
        put_ok(a, NAMESPACE, "from-a", b"stored through replica a", created=True)
        follower.join(timeout=15)
        assert not follower.is_alive()
        assert watcher.waiting == 0
        assert [e["key"] for e in answers[0]["entries"] if e["seq"] > cursor] == ["from-a"]


def test_live_deliveries_are_counted_with_the_compile_time_they_saved(client: TestClient) -> None:
    put_ok(client, NAMESPACE, "k", b"executable", compile_ms=4500, created=True)
    assert client.get(f"{NS}/entries/k", headers={"X-Live-Delivery": "1"}).content == b"executable"
    assert client.get(f"{NS}/entries/k").status_code == 200  # an ordinary hit
    totals = client.get("/admin/stats").json()["totals"]
    assert (totals["hits"], totals["live_deliveries"], totals["live_compile_seconds_saved"]) == (2, 1, 4.5)


def test_bad_cursors_and_waits_are_refused(client: TestClient) -> None:
    for params in ({"after": -1}, {"after": 1, "wait": 61}, {"after": "x"}, {"after": 1, "limit": 0}):
        assert client.get(f"{NS}/feed", params=params).status_code == 400, params
    assert client.get("/v1/namespaces/bad..name/feed").status_code == 400


def test_500_waiting_followers_do_not_slow_the_other_requests(tmp_path: Path) -> None:
    with run_server(tmp_path) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        put_ok(http, NAMESPACE, "k", b"x" * 4096, created=True)
        cursor = http.get(f"{NS}/feed").json()["cursor"]

        def latencies() -> list[float]:
            seconds = []
            for _ in range(60):
                started = time.perf_counter()
                assert http.get(f"{NS}/entries/k").status_code == 200
                seconds.append(time.perf_counter() - started)
            return seconds

        alone = statistics.median(latencies())
        host, port = server.url.removeprefix("http://").split(":")
        request = f"GET {NS}/feed?after={cursor}&wait=30 HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        with ExitStack() as stack:
            followers = [stack.enter_context(socket.create_connection((host, int(port)))) for _ in range(500)]
            for sock in followers:
                sock.sendall(request)
            wait_until(  # until they are all waiting: the server has read every request
                lambda: read_by_server(followers),
                timeout=30,
                message="the server did not read every follower",
            )
            wait_until(settled(server.pid), timeout=30, message="the server stayed busy with the followers")
            rss = _rss_mib(server.pid)
            crowded = statistics.median(latencies())
            assert http.get("/healthz").status_code == 200
            put_ok(http, NAMESPACE, "k2", b"wakes them all", created=True)
            for sock in followers[:20]:  # each is answered with the new entry
                sock.settimeout(10)
                assert b"k2" in _read_some(sock)
        assert crowded < 3 * alone + 0.005, (alone, crowded)
        assert rss < 400, rss


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _read_some(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        piece = sock.recv(65536)
        if not piece:
            break
        data += piece
    return data


def test_a_follower_that_hangs_up_stops_waiting_at_once(settings: Settings) -> None:
    """Before: a long poll whose client went away waited out its ``wait`` (up to a minute), request state and
    all: 2,000 hang-ups held 2,000 waiters and grew a server from 96 to 136 MB (rising). Now a hang-up ends
    the poll (logged as 499), and its waiter is gone."""
    hangups = 300
    app = create_app(settings)
    with serve_in_thread(app) as url:
        port = int(url.rsplit(":", 1)[1])
        with httpx.Client(base_url=url, timeout=30) as http:
            cursor = http.get(f"{NS}/feed").json()["cursor"]
            watcher = app.state.feed_watcher
            with ExitStack() as stack:
                for _ in range(hangups):
                    sock = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
                    sock.sendall(f"GET {NS}/feed?after={cursor}&wait=60 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                wait_until(lambda: watcher.waiting == hangups, timeout=20, message="the polls never waited")
                began = time.monotonic()
            wait_until(
                lambda: watcher.waiting == 0, timeout=10, message=lambda: f"{watcher.waiting} still wait"
            )
            ended = time.monotonic() - began
            # the feed still works for the next follower
            put_ok(http, NAMESPACE, "after", b"still served", created=True)
            answer = http.get(f"{NS}/feed", params={"after": cursor, "wait": 5}).json()
    assert [entry["key"] for entry in answer["entries"]] == ["after"]
    print(f"\n{hangups} followers waiting 60 s hung up: no waiter left after {ended:.2f} s")
