"""GET /metrics after known traffic: the numbers match, in one process and across two uvicorn workers."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from cache_protocol import SHA256_HEADER
from cache_server.api.telemetry import ACCESS_LOGGER
from cache_server.errors import IndexUnavailable
from cache_server.metrics import UNKNOWN_NAMESPACE, NamespaceLabels
from cache_server.settings import Settings
from cache_server.wiring import build_services
from tests.support.api import member, post_bulk, put_ok, sha
from tests.support.apps import client_for
from tests.support.clock import ManualMonotonic
from tests.support.metrics import Samples, metric_samples
from tests.support.server import run_server
from tests.support.wait import wait_until

ENTRY_ROUTE = "/v1/namespaces/{namespace}/entries/{key:path}"


def scrape(get: Callable[[str], httpx.Response]) -> Samples:
    response = get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return metric_samples(response.text)


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_metrics_after_known_traffic(client: TestClient) -> None:
    before = scrape(client.get)
    put_ok(client, "m-ns", "a", b"a" * 1000)
    put_ok(client, "m-ns", "b", b"b" * 2000)
    for _ in range(3):
        assert client.get("/v1/namespaces/m-ns/entries/a").status_code == 200
    assert client.get("/v1/namespaces/m-ns/entries/zzz").status_code == 404
    assert client.post("/v1/namespaces/m-ns/missing", json={"keys": ["a", "q"]}).status_code == 200
    assert (
        client.post("/admin/evict", json={"max_total_bytes": 1000, "namespace": "m-ns"}).json()["evicted"]
        == 1
    )
    after = scrape(client.get)

    requests = "xla_cache_http_requests_total"
    assert delta(after, before, requests, route=ENTRY_ROUTE, method="PUT", status="201") == 2
    assert delta(after, before, requests, route=ENTRY_ROUTE, method="GET", status="200") == 3
    assert delta(after, before, requests, route=ENTRY_ROUTE, method="GET", status="404") == 1
    assert (
        delta(after, before, requests, route="/metrics", method="GET", status="200") == 1
    )  # the first scrape
    latency = "xla_cache_http_request_duration_seconds_count"
    assert delta(after, before, latency, route=ENTRY_ROUTE, method="GET") == 4
    assert delta(after, before, "xla_cache_hits_total", namespace="m-ns") == 3
    assert delta(after, before, "xla_cache_misses_total", namespace="m-ns") == 1  # "missing" is not a miss
    assert delta(after, before, "xla_cache_http_received_bytes_total", route=ENTRY_ROUTE) == 3000
    assert delta(after, before, "xla_cache_http_sent_bytes_total", route=ENTRY_ROUTE) >= 3 * 1000
    assert delta(after, before, "xla_cache_evictions_total", namespace="m-ns") == 1
    # b is the least recently used: a was downloaded after b was uploaded.
    assert delta(after, before, "xla_cache_evicted_bytes_total", namespace="m-ns") == 2000
    assert after[("xla_cache_stored_entries", (("namespace", "m-ns"),))] == 1
    assert after[("xla_cache_stored_bytes", (("namespace", "m-ns"),))] == 1000
    assert after[("xla_cache_index_up", ())] == 1
    assert after[("xla_cache_storage_budget_bytes", ())] == 0  # no XLA_CACHE_MAX_TOTAL_BYTES here


def test_bulk_members_are_counted_by_status_refused_ones_included(client: TestClient) -> None:
    """A bulk upload is 200 whatever its members' fates: each member counts under the status a PUT of it
    would have had, so refused ones show on /metrics (the uploads-refused alert reads them)."""
    put_ok(client, "bulk-ns", "there", b"t" * 10)
    before = scrape(client.get)
    members = [
        member("new", b"n" * 10),
        member("there", b"t" * 10),
        member("bad", b"b" * 10, digest="0" * 64),
        member("other", b"o" * 10),
    ]
    answer = post_bulk(client, "bulk-ns", members)
    assert answer.status_code == 200
    assert answer.json()["refused"] == 1
    after = scrape(client.get)
    counted = {
        code: delta(after, before, "xla_cache_bulk_members_total", status=code)
        for code in ("201", "200", "400")
    }
    assert counted == {"201": 2, "200": 1, "400": 1}


def test_access_log_is_one_json_line_per_request_without_tokens(
    auth_client: TestClient, tokens: dict[str, str]
) -> None:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    keep = Keep()
    logging.getLogger(ACCESS_LOGGER).addHandler(keep)
    try:
        data = b"x" * 123
        headers = {SHA256_HEADER: sha(data), "Authorization": f"Bearer {tokens['write']}"}
        assert (
            auth_client.put("/v1/namespaces/logged/entries/k1", content=data, headers=headers).status_code
            == 201
        )
        # an old link with a token in its query (no longer taken): the query never reaches the log either
        link = auth_client.get("/", params={"token": tokens["read"]}, follow_redirects=False)
        assert link.status_code == 200
        assert auth_client.get("/v1/namespaces/logged/entries/k1").status_code == 401
    finally:
        logging.getLogger(ACCESS_LOGGER).removeHandler(keep)
    assert len(lines) == 3
    put, link_line, denied = (json.loads(line) for line in lines)
    assert put["method"] == "PUT" and put["path"] == "/v1/namespaces/logged/entries/k1"
    assert (put["status"], put["bytes_in"], put["namespace"], put["token_name"]) == (
        201,
        123,
        "logged",
        "user-write",
    )
    assert put["duration_ms"] > 0 and put["bytes_out"] > 0 and put["route"] == ENTRY_ROUTE
    assert (link_line["path"], link_line["status"]) == ("/", 200)
    assert (denied["status"], denied["token_name"]) == (401, None)
    for line in lines:
        for token in tokens.values():
            assert token not in line and token.split("_", 2)[2] not in line  # nor its secret part
        assert "token=" not in line and "?" not in line


def entry_gets(after: Samples, before: Samples) -> float:
    return delta(
        after, before, "xla_cache_http_requests_total", route=ENTRY_ROUTE, method="GET", status="200"
    )


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    data_dir = tmp_path_factory.mktemp("two-workers")
    with run_server(data_dir, {"TMPDIR": str(data_dir)}, workers=2) as server:
        yield server.url, data_dir
    assert not list(data_dir.glob("xla-cache-metrics-*")), "serve left its metrics directory behind"


def test_two_workers_report_the_sum_of_both(two_workers: tuple[str, Path]) -> None:
    url, data_dir = two_workers
    metrics_dirs = list(data_dir.glob("xla-cache-metrics-*"))
    assert len(metrics_dirs) == 1  # serve made one for its workers
    with httpx.Client(base_url=url, timeout=30) as http:
        before = scrape(http.get)
        data = os.urandom(4096)
        assert (
            http.put(
                "/v1/namespaces/w2/entries/e", content=data, headers={SHA256_HEADER: sha(data)}
            ).status_code
            == 201
        )

        def download(_: int) -> bytes:
            with httpx.Client(base_url=url, timeout=30) as fresh:  # a new connection: either worker
                response = fresh.get("/v1/namespaces/w2/entries/e")
                assert response.status_code == 200
                return response.content

        downloads = [0]

        def both_workers_served() -> bool:
            """Download in concurrent batches until each worker has served (and so written metrics)."""
            with ThreadPoolExecutor(6) as pool:
                assert all(body == data for body in pool.map(download, range(30)))
            downloads[0] += 30
            return len({p.name.split("_")[-1] for p in metrics_dirs[0].glob("*.db")}) >= 2

        wait_until(both_workers_served, timeout=60, interval=0.0, message="one worker took every request")
        # A request is counted once its response has been sent, so the worker that served the last
        # download may count it just after the client has it: wait until every request is counted.
        counted = [0.0]

        def all_counted() -> bool:
            counted[0] = entry_gets(scrape(http.get), before)
            assert counted[0] <= downloads[0], f"{counted[0]} GETs counted, not {downloads[0]}"
            return counted[0] == downloads[0]

        wait_until(
            all_counted,
            timeout=20,
            interval=0.1,
            message=lambda: f"{counted[0]} GETs counted, not {downloads[0]}",
        )
        scrapes = []
        for _ in range(6):  # whichever worker answers, the totals are the same
            with httpx.Client(base_url=url, timeout=30) as fresh:
                scrapes.append(scrape(fresh.get))
    worker_files = {p.name.split("_")[-1] for p in metrics_dirs[0].glob("*.db")}
    assert len(worker_files) >= 2, f"only one worker wrote metrics: {worker_files}"
    for after in scrapes:
        assert delta(after, before, "xla_cache_hits_total", namespace="w2") == downloads[0]
        assert entry_gets(after, before) == downloads[0]
        assert delta(after, before, "xla_cache_http_received_bytes_total", route=ENTRY_ROUTE) == 4096
        assert after[("xla_cache_stored_bytes", (("namespace", "w2"),))] == 4096


def test_made_up_namespaces_share_one_label_and_cost_one_read_per_period() -> None:
    registered = ["real"]
    index_down = False

    def names() -> list[str]:
        if index_down:
            raise IndexUnavailable("the index is down")
        return list(registered)

    clock = ManualMonotonic()
    labels = NamespaceLabels(names, refresh_seconds=5.0, monotonic=clock)
    flood = {labels.label(f"made-up-{i}") for i in range(10_000)}
    assert flood == {UNKNOWN_NAMESPACE}
    assert labels.reads == 1  # 10,000 unknown names within one period: one read of the index
    assert labels.label("real") == "real"
    registered.append("elsewhere")  # registered by another worker or replica
    assert labels.label("elsewhere") == UNKNOWN_NAMESPACE  # until the period is over
    clock.advance(5.0)
    assert labels.label("elsewhere") == "elsewhere"
    assert labels.reads == 2
    assert labels.registered("stored-here") == "stored-here"  # its hits: known at once, no read
    assert labels.label("stored-here") == "stored-here" and labels.reads == 2
    index_down = True
    clock.advance(5.0)
    assert labels.label("made-up") == UNKNOWN_NAMESPACE  # no error, and what was known stays known
    assert labels.label("real") == "real"


def test_a_flood_of_made_up_namespaces_leaves_a_registered_one_its_label(tmp_path: Path) -> None:
    """Before: the first 1,000 names asked for took every label, so a real namespace asked for afterwards was
    counted under ``_other`` until a restart. Now made-up names are ``_unknown`` and a namespace registered
    by another process (here: the test's own, on the same index) gets its own label."""
    data_dir = tmp_path / "data"
    flood = 1200
    env = {"XLA_CACHE_METRICS_LABEL_REFRESH_SECONDS": "0.5"}
    with run_server(data_dir, env) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        before = scrape(http.get)
        for i in range(flood):
            assert http.get(f"/v1/namespaces/made-up-{i}/entries/k").status_code == 404
        settings = Settings(data_dir=data_dir)
        elsewhere = build_services(settings)
        try:
            elsewhere.cache.register_namespace("real", {"runtime": "x"}, {})
        finally:
            elsewhere.stop()

        def counted_as_real() -> float:
            assert http.get("/v1/namespaces/real/entries/k").status_code == 404
            return delta(scrape(http.get), before, "xla_cache_misses_total", namespace="real")

        wait_until(counted_as_real, timeout=20, message="misses of 'real' never got its label")
        after = scrape(http.get)
    misses = {dict(labels).get("namespace") for (name, labels) in after if name == "xla_cache_misses_total"}
    assert misses == {"real", UNKNOWN_NAMESPACE}, sorted(m or "" for m in misses)[:10]
    unknown = delta(after, before, "xla_cache_misses_total", namespace=UNKNOWN_NAMESPACE)
    assert unknown >= flood
    real = delta(after, before, "xla_cache_misses_total", namespace="real")
    print(f"\n{flood} made-up namespaces: {unknown:.0f} misses as {UNKNOWN_NAMESPACE}; 'real': {real:.0f}")


def test_memory_answers_and_packing_later_are_counted(tmp_path: Path) -> None:
    """What operators tune the memory copies (XLA_CACHE_HOT_CACHE_*) and packing by: the single reads
    answered from memory, by answer, and the entries packed later."""
    with client_for(tmp_path, hot_cache_seconds=60, packs=True, pack_interval_seconds=3600) as client:
        before = scrape(client.get)
        for key in ("a", "b", "c", "d"):
            put_ok(client, "mem", key, key.encode() * 1000)
        url = "/v1/namespaces/mem/entries/a"
        assert client.get(url).status_code == 200  # the first read: index and store, then kept
        assert client.get(url).status_code == 200
        assert client.get(url).status_code == 200
        assert client.head(url).status_code == 200
        assert client.get(url, headers={"If-None-Match": f'"{sha(b"a" * 1000)}"'}).status_code == 304
        assert client.head("/v1/namespaces/mem/entries/b").status_code == 200  # not read before
        assert client.post("/admin/pack", json={}).json()["entries_packed"] == 4
        after = scrape(client.get)
    answers = "xla_cache_memory_answers_total"
    assert delta(after, before, answers, answer="get") == 2
    assert delta(after, before, answers, answer="head") == 1
    assert delta(after, before, answers, answer="not_modified") == 1
    assert delta(after, before, "xla_cache_packed_later_entries_total") == 4
