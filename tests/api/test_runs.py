"""Run reports over HTTP: POST /v1/runs stores them (bounded, owned, merged), GET /admin/runs lists them and
GET /admin/runs/{id} says why each compile happened, from entries stored through the real upload path."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cache_protocol.runs import MAX_COUNT, MAX_MISSES_PER_REPORT
from cache_server import metrics
from cache_server.wiring import Services
from tests.support.api import entry_url, put_ok
from tests.support.real_entries import real_entries
from tests.support.run_reports import run_report as report

# the real torch_xla entries: three shapes of SyncTensorsGraph.15 (parameter 1 is f32[n,16]) and one other
B8 = "141073805730141206780902128710512802542"  # (f32[16,3], f32[8,16])
B2 = "299184862721481437114806396320747224705"  # (f32[16,3], f32[2,16])
OTHER = "304900209432311687315369713663855754870"  # SyncTensorsGraph.12
B4 = "309309220741466217388041336712701653489"  # (f32[16,3], f32[4,16])
NS = "cpu-job"


def miss(key: str, **fields: Any) -> dict[str, Any]:
    return {"key": key, "module": None, "compile_seconds": 1.5, **fields}


def post(client: TestClient, body: dict[str, Any], **headers: str) -> Any:
    return client.post("/v1/runs", json=body, headers=headers)


def reasons(client: TestClient, run_id: str) -> dict[str, tuple[str, str]]:
    detail = client.get(f"/admin/runs/{run_id}").json()
    return {m["key"]: (m["reason"], m["detail"]) for m in detail["misses"]}


def store_real(client: TestClient, services: Services, keys: list[str], namespace: str = NS) -> None:
    entries = real_entries()
    for key in keys:
        put_ok(client, namespace, key, entries[key], compile_ms=2000)
    assert services.parsing.wait_idle(30)


def test_a_run_reported_twice_keeps_the_larger_numbers_and_adds_its_misses(client: TestClient) -> None:
    first = post(client, report(hits=10, misses=2, compile_seconds=3.0, new_misses=[miss("k1"), miss("k2")]))
    assert first.status_code == 200, first.text
    # a late report from before the first one arrives last: it lowers nothing
    late = post(client, report(hits=4, misses=1, compile_seconds=1.0, new_misses=[miss("k1")]))
    assert late.status_code == 200
    final = post(
        client, report(hits=12, misses=3, compile_seconds=4.5, ended_at=time.time(), new_misses=[miss("k3")])
    )
    assert final.status_code == 200
    runs = client.get("/admin/runs").json()["runs"]
    assert len(runs) == 1
    run = runs[0]
    assert (run["hits"], run["misses"], run["compile_seconds"]) == (12, 3, 4.5)
    assert run["hit_rate"] == pytest.approx(12 / 15)
    assert run["ended_at"] is not None
    detail = client.get("/admin/runs/run-00000001").json()
    assert [m["key"] for m in detail["misses"]] == ["k1", "k2", "k3"]
    assert detail["misses_total"] == 3
    assert client.get("/admin/runs/no-such-run").status_code == 404


def test_listing_filters(client: TestClient) -> None:
    now = time.time()
    post(client, report("run-a-000001", host="h1", started_at=now - 7200))
    post(client, report("run-b-000001", host="h2", framework="jax", started_at=now - 60))
    post(client, report("run-c-000001", host="h2", namespace="other-ns", started_at=now - 30))

    def ids(**params: Any) -> list[str]:
        response = client.get("/admin/runs", params=params)
        assert response.status_code == 200, response.text
        return [r["run_id"] for r in response.json()["runs"]]

    assert ids() == ["run-c-000001", "run-b-000001", "run-a-000001"]  # latest started first
    assert ids(namespace=NS) == ["run-b-000001", "run-a-000001"]
    assert ids(framework="jax") == ["run-b-000001"]
    assert ids(host="h2", limit=1) == ["run-c-000001"]
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 3600))
    assert ids(since=since) == ["run-c-000001", "run-b-000001"]
    assert ids(until=since) == ["run-a-000001"]
    assert client.get("/admin/runs", params={"limit": 0}).status_code == 400
    assert client.get("/admin/runs", params={"framework": "tensorflow"}).status_code == 400


def test_each_reason_from_entries_stored_through_uploads(client: TestClient, services: Services) -> None:
    entries = real_entries()
    # run 1 compiles three shapes of a graph never stored, and another graph; it uploads them
    misses = [miss(B2), miss(B4), miss(B8), miss(OTHER)]
    assert post(client, report("run-first-01", misses=4, new_misses=misses)).status_code == 200
    store_real(client, services, [B2, B4, B8, OTHER])
    got = reasons(client, "run-first-01")
    assert got[B2] == (
        "new_graph",
        "no entry of module SyncTensorsGraph.15 was stored in this namespace before",
    )
    assert got[OTHER][0] == "new_graph"
    # the other two are new shapes of the first: parameter 1's dimension 0 differs from the nearest
    assert got[B4] == (
        "new_shapes",
        "new shapes of module SyncTensorsGraph.15: parameter 1 dimension 0: 4 (nearest stored: 2)",
    )
    assert got[B8][0] == "new_shapes" and "parameter 1 dimension 0: 8 (nearest stored: 4)" in got[B8][1]
    detail = client.get("/admin/runs/run-first-01").json()
    b4 = next(m for m in detail["misses"] if m["key"] == B4)
    assert b4["dimensions"] == [{"param": 1, "dim": 0, "ours": 4, "theirs": 2}]
    assert b4["nearest_key"] == B2 and b4["shapes"] == "(f32[16,3], f32[4,16]) -> (f32[3])"
    assert detail["misses_explained"] == 4

    # run 2: the same graph at the same shapes under another key (torch_xla: no components to name)
    put_ok(client, NS, "same-graph-other-key", entries[B2])
    # a key stored once and removed since; a key that failed to load; opaque bytes the client named
    put_ok(client, NS, "gone-key", b"removed later")
    assert client.delete(entry_url(NS, "gone-key")).status_code == 204
    put_ok(client, NS, "opaque-key", b"a TPU executable: opaque bytes")
    assert services.parsing.wait_idle(30)
    run2 = [
        miss("same-graph-other-key"),
        miss("gone-key"),
        miss(B8, load_failed=True),
        miss("opaque-key", module="jit_step"),
    ]
    assert post(client, report("run-second-1", misses=4, new_misses=run2)).status_code == 200
    got = reasons(client, "run-second-1")
    assert got["same-graph-other-key"][0] == "different_key"
    assert B2 in got["same-graph-other-key"][1] or "under key" in got["same-graph-other-key"][1]
    assert got["gone-key"][0] == "evicted" and "by policy admin" in got["gone-key"][1]
    assert got[B8] == ("load_failed", "an entry of this key was stored, but it failed to load")
    assert got["opaque-key"][0] == "unknown" and "module jit_step" in got["opaque-key"][1]
    gone = next(m for m in client.get("/admin/runs/run-second-1").json()["misses"] if m["key"] == "gone-key")
    assert gone["policy"] == "admin" and gone["removed_at"] is not None


def test_different_key_names_the_jax_components_that_differ(client: TestClient, services: Services) -> None:
    entries = real_entries()
    first = {"computation": "aa11", "jax_lib version": "bb22", "compile_options": "cc33"}
    second = {**first, "compile_options": "dd44"}  # job D: one per-call compiler option more
    module = "SyncTensorsGraph.15"  # what the client knew of the module (the stored bytes say the same)
    for run_id, key, components in (("run-jax-a-01", "key-a", first), ("run-jax-d-01", "key-d", second)):
        new = [miss(key, module=module, components=components)]
        assert post(client, report(run_id, framework="jax", new_misses=new)).status_code == 200
        put_ok(client, NS, key, entries[B2])
    assert services.parsing.wait_idle(30)
    detail = client.get("/admin/runs/run-jax-d-01").json()
    (only,) = detail["misses"]
    assert only["reason"] == "different_key"
    assert only["differing_components"] == [
        {"component": "compile_options", "ours": "dd44", "theirs": "cc33"}
    ]
    assert only["detail"] == "same computation as key key-a; JAX's cache key differs in compile_options"


def test_different_key_is_named_against_the_same_computation_not_the_runs_other_shape(
    client: TestClient, services: Services
) -> None:
    """Job D compiles two shapes with one more compiler option: its second shape's nearest earlier miss by
    component count is its own first shape (only the computation differs), which explains nothing; the
    reason names the component that differs from job A's miss of the same computation."""
    entries = real_entries()
    a = {"computation": "aa11", "compile_options": "cc33"}
    post(
        client, report("run-jax-a-02", framework="jax", new_misses=[miss("key-a", module="m", components=a)])
    )
    put_ok(client, NS, "key-a", entries[B2])
    other_shape = {"computation": "ee55", "compile_options": "dd44"}
    post(
        client,
        report(
            "run-jax-d-02", framework="jax", new_misses=[miss("key-d1", module="m", components=other_shape)]
        ),
    )
    d = {"computation": "aa11", "compile_options": "dd44"}
    post(
        client, report("run-jax-d-02", framework="jax", new_misses=[miss("key-d2", module="m", components=d)])
    )
    put_ok(client, NS, "key-d2", entries[B2])
    assert services.parsing.wait_idle(30)
    misses = {m["key"]: m for m in client.get("/admin/runs/run-jax-d-02").json()["misses"]}
    assert misses["key-d2"]["reason"] == "different_key"
    assert misses["key-d2"]["differing_components"] == [
        {"component": "compile_options", "ours": "dd44", "theirs": "cc33"}
    ]


def test_misses_beyond_the_run_bound_are_counted_not_stored(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("cache_server.runs.ingest.MAX_MISSES_PER_RUN", 3)
    post(client, report(misses=2, new_misses=[miss("k1"), miss("k2")]))
    post(client, report(misses=5, new_misses=[miss("k3"), miss("k4"), miss("k5")]))
    detail = client.get("/admin/runs/run-00000001").json()
    assert [m["key"] for m in detail["misses"]] == ["k1", "k2", "k3"]
    assert detail["misses_total"] == 5


@pytest.mark.parametrize(
    "change",
    [
        {"hits": -1},
        {"hits": MAX_COUNT + 1},
        {"hits": 1.5},
        {"hits": True},
        {"hits": "12"},
        {"compile_seconds": 1e12},
        {"compile_seconds": -0.1},
        {"unknown_field": 1},
        {"run_id": "short"},
        {"run_id": "../../etc/passwd-x"},
        {"run_id": "x" * 65},
        {"namespace": "../escape"},
        {"namespace": "a" * 129},
        {"framework": "tensorflow"},
        {"host": ""},
        {"host": "h" * 257},
        {"host": "evil\nline"},
        # the third probe: C1 controls (U+009B, the 8-bit CSI), bidi overrides, zero-width and separators
        {"host": "x\u009b2J\u009b31mPWNED"},
        {"host": "admin\u202egnp.exe"},
        {"host": "host\u200b-1"},
        {"host": "line\u2028two"},
        {"new_misses": [miss("k", module="jit_\u200fstep")]},
        # numbers are JSON numbers, not strings
        {"warm_seconds": "1.5"},
        {"compile_seconds": "2"},
        {"started_at": "1700000000"},
        {"new_misses": [miss("k", compile_seconds="1.5")]},
        {"process_index": -1},
        {"started_at": -5},
        {"ended_at": 1.0},  # before started_at
        {"new_misses": [miss(f"k{i}") for i in range(MAX_MISSES_PER_REPORT + 1)]},
        {"new_misses": [miss("k1"), miss("k1")]},
        {"new_misses": [miss("../k")]},
        {"new_misses": [miss("k", module="m" * 257)]},
        {"new_misses": [miss("k", components={f"c{i}": "ab" for i in range(33)})]},
        {"new_misses": [miss("k", components={"computation": "not hex!"})]},
        {"new_misses": [miss("k", surprise=1)]},
        {"new_misses": [miss("k", load_failed="yes")]},
    ],
)
def test_hostile_reports_are_refused_and_store_nothing(client: TestClient, change: dict[str, Any]) -> None:
    response = post(client, report(**change))
    assert response.status_code == 400, response.text
    assert response.json()["error"] in ("bad_request", "invalid_name")
    assert client.get("/admin/runs").json()["runs"] == []


def test_printable_text_and_numbers_of_either_kind_are_taken(client: TestClient) -> None:
    body = report(host="gpu-节点-1 (rack 7)", warm_seconds=2, compile_seconds=1.5)
    body["new_misses"] = [miss("k", module="jit_шаг", compile_seconds=3)]
    assert post(client, body).status_code == 200
    [run] = client.get("/admin/runs").json()["runs"]
    assert (run["host"], run["warm_seconds"], run["compile_seconds"]) == ("gpu-节点-1 (rack 7)", 2.0, 1.5)


@pytest.mark.parametrize(
    ("since", "until", "found"),
    [
        ("9999-12-31T23:59:59-14:00", None, 0),  # past the last time UTC can hold: after every run
        ("0001-01-01T00:00:00+14:00", None, 1),  # before the first: every run
        (None, "0001-01-01T00:00:00+14:00", 0),
        (None, "9999-12-31T23:59:59-14:00", 1),
        ("9999-12-31T23:59:59.999999", None, 0),
    ],
)
def test_time_filters_at_the_ends_of_the_range_answer(
    client: TestClient, since: str | None, until: str | None, found: int
) -> None:
    assert post(client, report()).status_code == 200
    params = {name: value for name, value in (("since", since), ("until", until)) if value is not None}
    answer = client.get("/admin/runs", params=params)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["runs"]) == found


def test_a_report_not_json_or_too_big_is_refused(client: TestClient) -> None:
    assert (
        client.post(
            "/v1/runs", content=b"{not json", headers={"Content-Type": "application/json"}
        ).status_code
        == 400
    )
    assert (
        client.post("/v1/runs", content=b"[]", headers={"Content-Type": "application/json"}).status_code
        == 400
    )
    assert client.get("/admin/runs").json()["runs"] == []


def test_a_run_keeps_its_namespace_and_framework(client: TestClient) -> None:
    assert post(client, report()).status_code == 200
    for change in ({"namespace": "another-ns"}, {"framework": "jax"}):
        response = post(client, report(**change, hits=5))
        assert response.status_code == 409 and response.json()["error"] == "run_conflict"
    assert client.get("/admin/runs").json()["runs"][0]["hits"] == 0


def test_metrics_grow_by_the_difference_between_reports(client: TestClient) -> None:
    def value(name: str) -> float:
        return metrics.REGISTRY.get_sample_value(name, {"framework": "torchax"}) or 0.0

    before = {
        n: value(n)
        for n in (
            "xla_cache_runs_total",
            "xla_cache_run_hits_total",
            "xla_cache_run_misses_total",
            "xla_cache_run_compile_seconds_total",
        )
    }
    post(client, report("run-metrics-1", framework="torchax", hits=10, misses=2, compile_seconds=4.0))
    post(client, report("run-metrics-1", framework="torchax", hits=15, misses=3, compile_seconds=5.5))
    post(client, report("run-metrics-1", framework="torchax", hits=12, misses=3, compile_seconds=5.0))  # late
    assert value("xla_cache_runs_total") - before["xla_cache_runs_total"] == 1
    assert value("xla_cache_run_hits_total") - before["xla_cache_run_hits_total"] == 15
    assert value("xla_cache_run_misses_total") - before["xla_cache_run_misses_total"] == 3
    assert value("xla_cache_run_compile_seconds_total") - before[
        "xla_cache_run_compile_seconds_total"
    ] == pytest.approx(5.5)
    scrape = client.get("/metrics").text
    assert 'xla_cache_run_hits_total{framework="torchax"}' in scrape


def test_saved_is_what_each_loaded_entry_cost_to_compile(client: TestClient, services: Services) -> None:
    """Issue 46, item 6: each hit saves its own entry's recorded compile time; lookups save nothing."""
    put_ok(client, NS, "k", b"bytes", compile_ms=3000)
    put_ok(client, NS, "k2", b"other bytes", compile_ms=1500)
    for _ in range(5):
        assert client.get(entry_url(NS, "k")).status_code == 200  # downloads: no job said it loaded them
    services.access.flush()
    post(client, report(hits=4, hit_keys=["k"]))
    assert client.get("/admin/runs").json()["runs"][0]["saved_seconds"] == pytest.approx(3.0)
    post(client, report(hits=5, hit_keys=["k2", "unknown-key"]))  # the next report's hits add theirs
    assert client.get("/admin/runs").json()["runs"][0]["saved_seconds"] == pytest.approx(4.5)


FIXTURES = Path(__file__).parents[1] / "admin" / "fixtures"


@pytest.mark.parametrize(
    ("folder", "names"),
    [
        # JAX TPU entries made deviceless (libtpu 0.0.42.1, v5e): two input shapes of jit_step, three sizes
        # baked into jit_baked_step at one input shape
        (
            "jax_0.10.2_tpu",
            [
                "v5e-step-rows2",
                "v5e-step-rows4",
                "v5e-baked_step-n3",
                "v5e-baked_step-n5",
                "v5e-baked_step-n9",
            ],
        ),
        # the same baked function's JAX CPU entries
        ("jax_0.10.2_cpu_baked", [None, None, "n3-rows16", "n5-rows16", "n9-rows16"]),
    ],
)
def test_tpu_entries_are_explained_as_cpu_entries_are(
    client: TestClient, services: Services, folder: str, names: list[str | None]
) -> None:
    keys = [f"jit_entry-{i}-cache" for i, name in enumerate(names) if name is not None]
    for key, name in zip(keys, [n for n in names if n is not None], strict=True):
        put_ok(client, "jax-ns", key, (FIXTURES / folder / name).read_bytes())
    assert services.parsing.wait_idle(30)
    new = [miss(key, module=None) for key in keys]
    body = report("run-tpu-0001", namespace="jax-ns", framework="jax", misses=len(keys), new_misses=new)
    assert post(client, body).status_code == 200
    detail = client.get("/admin/runs/run-tpu-0001").json()
    got = [(m["module"], m["reason"]) for m in detail["misses"]]
    expected = [("jit_step", "new_graph"), ("jit_step", "new_shapes")] if names[0] else []
    expected += [
        ("jit_baked_step", "new_graph"),
        ("jit_baked_step", "baked_sizes"),
        ("jit_baked_step", "baked_sizes"),
    ]
    assert got == expected
    n9 = detail["misses"][-1]
    limit = next(b for b in n9["baked_sizes"] if (b["opcode"], b["attribute"]) == ("slice", "limit"))
    assert (limit["ours"], limit["theirs"]) == (9, 5)  # the nearest: 5 rows
    assert "limit[0] 9 (stored: 5)" in n9["detail"]
    assert detail["reasons"] == dict(Counter(reason for _, reason in expected))
    assert detail["graphs"]["jit_baked_step"] == "/admin/graphs?namespace=jax-ns&module=jit_baked_step"
    graphs = client.get(detail["graphs"]["jit_baked_step"]).json()["graphs"]
    assert [g["module"] for g in graphs] == ["jit_baked_step"]  # the link gives that graph only
    baked = graphs[0]["baked_sizes"]
    (size,) = baked["sizes"]
    assert (size["opcode"], size["attribute"], size["values"]) == ("slice", "limit", [3, 5, 9])
    assert baked["frontier"][0]["compiles"] == 1 and baked["frontier"][-1]["compiles"] == 3


def test_a_run_is_found_by_a_unique_prefix_of_its_id_and_an_ambiguous_one_lists_the_runs(
    client: TestClient,
) -> None:
    for run_id in ("run-prefix-aaaa1", "run-prefix-aaaa2", "run_x_000001", "runAxB000001"):
        assert post(client, report(run_id)).status_code == 200
    assert client.get("/admin/runs/run-prefix-aaaa2").json()["run_id"] == "run-prefix-aaaa2"  # exact
    assert client.get("/admin/runs/run-prefix-aaaa1x").status_code == 404
    ambiguous = client.get("/admin/runs/run-prefix-a")
    assert ambiguous.status_code == 409 and ambiguous.json()["error"] == "run_ambiguous"
    assert (
        "run-prefix-aaaa1" in ambiguous.json()["detail"] and "run-prefix-aaaa2" in ambiguous.json()["detail"]
    )
    # '_' in a prefix is itself, not LIKE's any-character: run_x matches run_x_000001 only
    assert client.get("/admin/runs/run_x").json()["run_id"] == "run_x_000001"
    assert client.get("/admin/runs/runAx").json()["run_id"] == "runAxB000001"
    assert client.get("/admin/runs/run").status_code == 404  # shorter than 4 characters: a whole id only
    assert client.get("/admin/runs/r%25n-").status_code == 404  # not a run id's characters


def test_a_runs_compiles_page_through_with_the_count_of_each_reason(client: TestClient) -> None:
    new = [miss(f"key-{i:04d}") for i in range(250)]
    assert post(client, report("run-paged-0001", misses=250, new_misses=new)).status_code == 200
    first = client.get("/admin/runs/run-paged-0001", params={"limit": 100}).json()
    assert [m["key"] for m in first["misses"]] == [f"key-{i:04d}" for i in range(100)]
    # each reason counted over the compiles listed so far: their reasons are kept, never explained again
    assert first["reasons"] == {"unknown": 100} and first["reasons_counted"] == 100
    assert first["misses_stored"] == 250 and first["misses_total"] == 250 and first["offset"] == 0
    last = client.get("/admin/runs/run-paged-0001", params={"limit": 100, "offset": 200}).json()
    assert [m["key"] for m in last["misses"]] == [f"key-{i:04d}" for i in range(200, 250)]
    assert last["offset"] == 200 and last["reasons"] == {"unknown": 150}
    counts = client.get("/admin/runs/run-paged-0001", params={"limit": 0}).json()
    assert (
        counts["misses"] == [] and counts["reasons"] == {"unknown": 150} and counts["reasons_counted"] == 150
    )
    beyond = client.get("/admin/runs/run-paged-0001", params={"offset": 250}).json()
    assert beyond["misses"] == [] and beyond["reasons"] == {"unknown": 150}
    assert client.get("/admin/runs/run-paged-0001", params={"limit": 1001}).status_code == 400


def test_where_a_job_compiled_each_graph_is_kept_and_shown_by_the_run_and_the_graphs_report(
    client: TestClient, services: Services
) -> None:
    here, there = "jobs/train.py:57", "jobs/eval.py:12"
    misses = [miss(B2, source=here), miss(B4, source=here), miss(B8, source=there), miss(OTHER)]
    assert post(client, report("run-sources-1", misses=4, new_misses=misses)).status_code == 200
    store_real(client, services, [B2, B4, B8, OTHER])
    detail = client.get("/admin/runs/run-sources-1").json()
    assert {m["key"]: m["source"] for m in detail["misses"]} == {B2: here, B4: here, B8: there, OTHER: None}
    graphs = client.get("/admin/graphs", params={"namespace": NS}).json()["graphs"]
    by_module = {g["module"]: g["sources"] for g in graphs}
    assert by_module["SyncTensorsGraph.15"] == [
        {"source": here, "entries": 2},
        {"source": there, "entries": 1},
    ]
    assert by_module["SyncTensorsGraph.12"] == []  # its run did not say where


@pytest.mark.parametrize("source", ["", "x" * 201, "train.py:\x1b[31m57", 57])
def test_a_source_out_of_bounds_is_refused_and_nothing_is_stored(client: TestClient, source: Any) -> None:
    body = report("run-sources-2", misses=1, new_misses=[miss(B2, source=source)])
    answer = post(client, body)
    assert answer.status_code in (400, 422), answer.text
    assert client.get("/admin/runs/run-sources-2").status_code == 404
