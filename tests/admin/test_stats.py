"""GET /admin/stats: what an operator reads off it after known traffic, and after a restart."""

from __future__ import annotations

import datetime as dt

from fastapi.testclient import TestClient

from cache_server.app import create_app
from cache_server.index import GraphRepository
from cache_server.settings import Settings
from cache_server.wiring import Services
from tests.support.api import put_ok, sha
from tests.support.apps import another_cache_service, services_of
from tests.support.clock import clear_of_utc_midnight
from tests.support.real_entries import real_entries


def _traffic(client: TestClient) -> None:
    client.put("/v1/namespaces/vision", json={"fingerprint": {"torch_xla": "2.7.0"}, "labels": {"team": "v"}})
    put_ok(client, "vision", "k1", b"a" * 1000, **{"X-Compile-Time-Ms": "12000"})
    put_ok(client, "vision", "k2", b"b" * 3000)  # no compile time reported
    put_ok(client, "text", "t1", b"c" * 500, **{"X-Compile-Time-Ms": "2500"})
    for _ in range(3):
        assert client.get("/v1/namespaces/vision/entries/k1").status_code == 200
    assert client.get("/v1/namespaces/vision/entries/k2").status_code == 200
    assert client.get("/v1/namespaces/vision/entries/nope").status_code == 404
    bundle = client.post("/v1/namespaces/text/bundle", json={"keys": ["t1", "t-missing", "t-missing-2"]})
    assert bundle.status_code == 200


def test_totals_and_namespaces_after_known_traffic(client: TestClient) -> None:
    _traffic(client)
    body = client.get("/admin/stats").json()
    totals = body["totals"]
    assert totals == {
        "entries": 3,
        "bytes": 4500,
        "hits": 5,
        "misses": 3,
        "hit_rate": 5 / 8,
        "uploads": 3,
        "evictions": 0,
        "bytes_served": 3 * 1000 + 3000 + 500,
        "bytes_uploaded": 4500,
        "compile_seconds_saved": 3 * 12.0 + 2.5,
        "live_deliveries": 0,  # no job followed
        "live_compile_seconds_saved": 0.0,
    }
    by_name = {ns["namespace"]: ns for ns in body["namespaces"]}
    assert set(by_name) == {"vision", "text"}
    vision = by_name["vision"]
    assert (vision["entries"], vision["bytes"], vision["hits"], vision["misses"]) == (2, 4000, 4, 1)
    assert vision["hit_rate"] == 0.8
    assert vision["compile_seconds_saved"] == 36.0 and vision["bytes_uploaded"] == 4000
    assert vision["labels"] == {"team": "v"}
    assert by_name["text"]["misses"] == 2 and by_name["text"]["hit_rate"] == 1 / 3
    assert [ns["namespace"] for ns in body["namespaces"]] == ["vision", "text"]  # largest first


def test_daily_rollup_has_today_and_empty_days(client: TestClient) -> None:
    clear_of_utc_midnight()  # the traffic and "today" below must be one UTC day
    _traffic(client)
    body = client.get("/admin/stats", params={"days": 7}).json()
    days = body["daily"]
    assert len(days) == 7
    today = dt.datetime.now(dt.timezone.utc).date()
    assert [d["day"] for d in days] == [str(today - dt.timedelta(days=6 - i)) for i in range(7)]
    assert days[-1]["hits"] == 5 and days[-1]["misses"] == 3 and days[-1]["uploads"] == 3
    assert days[-1]["bytes_uploaded"] == 4500 and days[-1]["hit_rate"] == 5 / 8
    assert days[-1]["compile_seconds_saved"] == 38.5
    assert all(d["hits"] == 0 and d["hit_rate"] is None for d in days[:-1])


def test_counts_survive_a_restart(settings: Settings, services: Services) -> None:
    clear_of_utc_midnight()  # both reports' daily windows must end on the same UTC day
    with TestClient(create_app(settings, services)) as first:
        _traffic(first)
        before = first.get("/admin/stats").json()
    # Stopping flushed the last counters; a fresh app on the same data dir sees the same numbers.
    with TestClient(create_app(settings)) as again:
        after = again.get("/admin/stats").json()
    assert after["totals"] == before["totals"]
    assert after["daily"] == before["daily"]


def test_unregistered_namespace_misses_make_no_rows(client: TestClient) -> None:
    assert client.get("/v1/namespaces/never-registered/entries/k").status_code == 404
    body = client.get("/admin/stats").json()
    assert body["namespaces"] == [] and body["totals"]["misses"] == 0


def test_graphs_with_most_shape_variants(client: TestClient) -> None:
    for key, data in real_entries().items():
        put_ok(client, "cpu-job", key, data)
    put_ok(client, "cpu-job", "not-an-executable", b"\x00" * 2048)  # stored, never listed
    put_ok(client, "other-job", "tpu-like", b"opaque executable bytes")
    assert services_of(client).parsing.wait_idle(30)
    graphs = client.get("/admin/stats").json()["top_graphs"]
    assert [(g["namespace"], g["module"], g["variants"], g["entries"]) for g in graphs] == [
        ("cpu-job", "SyncTensorsGraph.15", 3, 3),
        ("cpu-job", "SyncTensorsGraph.12", 1, 1),
    ]
    top = graphs[0]
    assert top["examples"] == [
        "(f32[16,3], f32[2,16]) -> (f32[3])",
        "(f32[16,3], f32[4,16]) -> (f32[3])",
        "(f32[16,3], f32[8,16]) -> (f32[3])",
    ]
    assert top["source"].endswith("tests/admin/fixtures/generate_entries.py:20")
    other_graph = "304900209432311687315369713663855754870"
    assert top["bytes"] == sum(len(data) for key, data in real_entries().items() if key != other_graph)
    only_top = client.get("/admin/stats", params={"top": 1, "namespace": "cpu-job"}).json()
    assert [g["module"] for g in only_top["top_graphs"]] == ["SyncTensorsGraph.15"]
    assert [ns["namespace"] for ns in only_top["namespaces"]] == ["cpu-job"]


def test_entries_stored_before_start_are_parsed_by_the_catch_up(
    settings: Settings, services: Services
) -> None:
    entries = real_entries()
    # Stored by another server process: a cache service with no admin side listening to it.
    elsewhere = another_cache_service(settings, services)
    for key, data in entries.items():
        elsewhere.put_entry("early", key, [data], sha256=sha(data))
    with TestClient(create_app(settings, services)) as client:
        # The catch-up is counted as pending from start(), so waiting covers it even before the
        # graph thread has begun the scan.
        assert services.parsing.wait_idle(30)
        assert GraphRepository(services.database).unparsed_entries(1) == []
        graphs = client.get("/admin/stats").json()["top_graphs"]
    assert sum(g["entries"] for g in graphs) == len(entries)
    assert graphs[0]["variants"] == 3


def test_bad_parameters_are_400(client: TestClient) -> None:
    assert client.get("/admin/stats", params={"days": 0}).status_code == 400
    response = client.get("/admin/stats", params={"namespace": "../etc"})
    assert response.status_code == 400 and response.json()["error"] == "invalid_name"
