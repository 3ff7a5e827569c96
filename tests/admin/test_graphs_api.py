"""GET /admin/graphs on SQLite and PostgreSQL: a namespace's graphs, their varying dimensions and what each
padding scheme would leave, who may ask, and what bad requests get."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cache_server.app import create_app
from cache_server.auth.tokens import Role
from cache_server.graphs.report import MAX_EXAMPLE_TEXT, MAX_GRAPH_SHAPES_TEXT, SOURCES_READ
from cache_server.index import EntryRepository
from cache_server.index.graph_records import GraphRecord, GraphRepository
from cache_server.index.migrate import upgrade
from cache_server.parsing.hlo import CUT_MARKER
from cache_server.settings import Settings
from cache_server.wiring import Services
from tests.support.apps import services_of
from tests.support.databases import fresh_database_url
from tests.support.entry_records import record
from tests.support.run_reports import run_report
from xla_cache.cli.graphs import graph_lines

ROWS = (0, 4, 8)  # parameter 1, dimension 0
TOKENS = (2, 3, 5, 9)  # parameter 2, dimension 0


def fuse_shapes(rows: int, tokens: int) -> str:
    return f"(f32[32,32], f32[{rows},32], s64[{tokens}]) -> (f32[64,32])"


def store(services: Services, namespace: str, key: str, module: str | None, shapes: str | None) -> None:
    """An entry, and what parsing it would have found (recorded here: no background parser runs)."""
    data = f"{namespace}/{key}".encode()
    services.cache.put_entry(namespace, key, [data], sha256=hashlib.sha256(data).hexdigest())
    signature = hashlib.sha256(shapes.encode()).hexdigest() if shapes else None
    GraphRepository(services.database).record_graphs([GraphRecord(namespace, key, module, signature, shapes)])


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    """An app with auth on over each index, with no background work (its lifespan is not entered), holding:
    in "vision" the graph "fuse" at 12 shapes (one stored twice), "small" at 2, an unparseable entry;
    in "text" a graph of 20 shapes and one of 3 results of the same input."""
    with fresh_database_url(request.param, tmp_path) as url:
        settings = Settings(
            data_dir=tmp_path / "data", database_url=url, auth=True, access_flush_seconds=60.0
        )
        upgrade(settings)
        client = TestClient(create_app(settings))
        services = services_of(client)
        for rows in ROWS:
            for tokens in TOKENS:
                store(services, "vision", f"fuse-{rows}-{tokens}", "fuse", fuse_shapes(rows, tokens))
        store(services, "vision", "fuse-again", "fuse", fuse_shapes(4, 3))  # another key, same shapes
        store(services, "vision", "small-1", "small", "(f32[3]) -> (f32[3])")
        store(services, "vision", "small-2", "small", "(f32[5]) -> (f32[5])")
        store(services, "vision", "opaque", None, None)
        for n in range(20):
            store(services, "text", f"t{n}", "embed", f"(s64[{n + 1}]) -> (f32[1])")
        for n in range(3):  # one input broadcast to other shapes: only the result varies
            store(services, "text", f"b{n}", "bcast", f"(f32[3]) -> (f32[{n + 2},3])")
        try:
            yield client
        finally:
            services.stop()


def bearer(app: TestClient, role: Role, namespaces: list[str] | None = None) -> dict[str, str]:
    token, _ = services_of(app).tokens.create(f"t-{role.label}-{len(namespaces or [])}", role, namespaces)
    return {"Authorization": f"Bearer {token}"}


def test_the_varying_dimensions_and_what_each_scheme_leaves(app: TestClient) -> None:
    response = app.get("/admin/graphs", params={"namespace": "vision"}, headers=bearer(app, Role.ADMIN))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["namespace"] == "vision"
    assert [(g["module"], g["variants"], g["entries"], g["read"]) for g in body["graphs"]] == [
        ("fuse", 12, 13, 12),
        ("small", 2, 2, 2),
    ]
    fuse = body["graphs"][0]
    assert [(d["label"], d["count"], d["min"], d["max"], d["values"]) for d in fuse["varying"]] == [
        ("p1.d0", 3, 0, 8, [0, 4, 8]),
        ("p2.d0", 4, 2, 9, [2, 3, 5, 9]),
    ]
    # pow2: rows 0 4 8, tokens 2 4 8 16; mult8: rows 0 8, tokens 8 16; mult64 and mult128: rows 0 and one
    left = {s["scheme"]: s["variants"] for s in fuse["schemes"]}
    assert left == {"pow2": 12, "mult8": 4, "mult64": 2, "mult128": 2}
    # overheads in bytes of the padded parameters: 128 bytes a row (f32[rows,32]), 8 a token (s64)
    pow2 = next(s for s in fuse["schemes"] if s["scheme"] == "pow2")
    real = [r * 128 + t * 8 for r in ROWS for t in TOKENS]
    padded = [r * 128 + {2: 2, 3: 4, 5: 8, 9: 16}[t] * 8 for r in ROWS for t in TOKENS]
    assert pow2["mean_overhead"] == pytest.approx(
        sum((p - q) / q for p, q in zip(padded, real, strict=True)) / 12
    )
    assert fuse["other_layouts"] == 0 and fuse["example"].startswith("(f32[32,32], f32[")
    assert fuse["result_cost"] is None  # its result f32[64,32] never changes
    assert (fuse["cost"], fuse["weights"], fuse["unchanged"]) == (
        "bytes of the padded parameters",
        "its entries' hits + 1 per variant",
        None,
    )


def test_hits_weigh_the_variants(app: TestClient) -> None:
    """A variant whose entries were hit more counts more in the mean overhead (entries.hits + 1)."""
    from sqlalchemy import update

    from cache_server.index.models import Entry

    with services_of(app).database.transaction() as session:
        session.execute(update(Entry).where(Entry.key == "fuse-0-3").values(hits=99))
        session.execute(
            update(Entry).where(Entry.key == "fuse-again").values(hits=5)
        )  # also 4 rows, 3 tokens
    body = app.get("/admin/graphs", params={"namespace": "vision"}, headers=bearer(app, Role.ADMIN)).json()
    fuse = body["graphs"][0]
    weight = {(r, t): 1 for r in ROWS for t in TOKENS}
    weight[(0, 3)] = 100
    weight[(4, 3)] = 1 + 0 + 5  # two entries at these shapes: hits 0 and 5, + 1 for the variant
    pad = {2: 2, 3: 4, 5: 8, 9: 16}
    ratios = {(r, t): ((r * 128 + pad[t] * 8) - (r * 128 + t * 8)) / (r * 128 + t * 8) for r, t in weight}
    pow2 = next(s for s in fuse["schemes"] if s["scheme"] == "pow2")
    expected = sum(weight[k] * ratios[k] for k in weight) / sum(weight.values())
    assert pow2["mean_overhead"] == pytest.approx(expected)


def test_per_dimension_choices_and_the_frontier(app: TestClient) -> None:
    body = app.get("/admin/graphs", params={"namespace": "vision"}, headers=bearer(app, Role.ADMIN)).json()
    fuse = body["graphs"][0]
    rows, tokens = fuse["varying"]
    # rows alone: as is (3 sizes, 12 compilations), max (8: 4 compilations, one per token count)
    by_name = {c["name"]: c for c in rows["choices"]}
    assert by_name["as is"] == {
        "name": "as is",
        "description": "as is",
        "sizes": 3,
        "compiles": 12,
        "boundaries": [],
        "mean_overhead": 0.0,
        "max_overhead": 0.0,
        "result_mean_overhead": None,  # the result never changes: it does not pad
        "result_max_overhead": None,
    }
    assert (by_name["max"]["sizes"], by_name["max"]["compiles"], by_name["max"]["boundaries"]) == (1, 4, [8])
    # rows to multiples of 8: 0 stays 0, 4 pads to 8 (the best 2 boundaries, 0 and 8, pad the same: not
    # listed twice)
    assert (by_name["mult8"]["sizes"], by_name["mult8"]["compiles"]) == (2, 8)
    assert "buckets2" not in by_name
    tokens_by_name = {c["name"]: c for c in tokens["choices"]}
    assert "pow2" not in tokens_by_name  # 2 4 8 16: still 4 sizes, so not offered
    assert tokens_by_name["mult8"]["sizes"] == 2 and tokens_by_name["mult8"]["compiles"] == 6
    frontier = fuse["frontier"]
    assert frontier[0]["choices"] == {"p1.d0": "max", "p2.d0": "max"} and frontier[0]["compiles"] == 1
    assert frontier[0]["description"] == "all max"
    assert frontier[-1]["choices"] == {"p1.d0": "as is", "p2.d0": "as is"} and frontier[-1]["compiles"] == 12
    assert 2 <= len(frontier) <= 6
    # all to the maximum, in bytes: 8 rows and 9 tokens for every variant
    real = [r * 128 + t * 8 for r in ROWS for t in TOKENS]
    assert frontier[0]["mean_overhead"] == pytest.approx(sum((8 * 128 + 72 - q) / q for q in real) / 12)


def test_nothing_varying_offers_no_padding(app: TestClient) -> None:
    body = app.get("/admin/graphs", params={"namespace": "text"}, headers=bearer(app, Role.ADMIN)).json()
    bcast = next(g for g in body["graphs"] if g["module"] == "bcast")
    assert (bcast["variants"], bcast["result_only"], bcast["varying"], bcast["schemes"]) == (3, 2, [], [])
    assert bcast["frontier"] == [] and bcast["cost"] is None
    assert bcast["unchanged"].startswith("no input dimension varies: padding cannot merge these variants")


def test_top_and_the_cap_on_variants_read(app: TestClient) -> None:
    admin = bearer(app, Role.ADMIN)
    one = app.get(
        "/admin/graphs", params={"namespace": "vision", "top": 1, "variants": 5}, headers=admin
    ).json()
    (fuse,) = one["graphs"]
    assert (fuse["module"], fuse["variants"], fuse["read"]) == ("fuse", 12, 5)
    assert all(s["variants"] <= 5 for s in fuse["schemes"])
    text = app.get("/admin/graphs", params={"namespace": "text"}, headers=admin).json()
    assert [(g["module"], g["variants"]) for g in text["graphs"]] == [("embed", 20), ("bcast", 3)]
    assert {s["scheme"]: s["variants"] for s in text["graphs"][0]["schemes"]} == {
        "pow2": 6,  # 1 2 4 8 16 32
        "mult8": 3,
        "mult64": 1,
        "mult128": 1,
    }


def test_a_report_reads_a_bounded_number_of_variants_in_all(app: TestClient) -> None:
    """The variants read are shared among the graphs: a small graph is read whole and leaves the rest of
    the report's share to the larger; a request's ``variants`` above the share still holds for one graph."""
    reports = services_of(app).graphs
    assert [(r.module, r.read) for r in reports.report("vision", per_graph=6, total=7)] == [
        ("fuse", 5),
        ("small", 2),
    ]
    assert [(r.module, r.read) for r in reports.report("vision", per_graph=11, total=7)] == [
        ("fuse", 9),  # 11 in all: the request's own cap per graph is more than the report's share
        ("small", 2),
    ]
    admin = bearer(app, Role.ADMIN)
    reads = app.get("/admin/graphs", params={"namespace": "vision", "variants": 3}, headers=admin).json()
    assert [(g["module"], g["read"]) for g in reads["graphs"]] == [("fuse", 3), ("small", 2)]


def test_a_read_token_reads_them_and_scoped_tokens_see_their_own(app: TestClient) -> None:
    url = "/admin/graphs"
    assert app.get(url, params={"namespace": "vision"}).status_code == 401
    read = bearer(app, Role.READ)
    assert app.get(url, params={"namespace": "vision"}, headers=read).status_code == 200
    assert app.get(url, params={"namespace": "vision"}, headers=bearer(app, Role.WRITE)).status_code == 200
    assert app.get(url, headers=read).status_code == 400  # the namespace is needed
    scoped = bearer(app, Role.WRITE, ["vis*"])
    assert app.get(url, params={"namespace": "vision"}, headers=scoped).status_code == 200
    outside = app.get(url, params={"namespace": "text"}, headers=scoped)
    assert (outside.status_code, outside.json()["error"]) == (403, "forbidden")
    assert app.get(url, headers=scoped).status_code == 403  # no namespace: a server-wide view
    repeated = app.get(f"{url}?namespace=vision&namespace=text", headers=scoped)
    assert repeated.status_code == 403  # the second one must not slip past the scope
    reader = bearer(app, Role.READ, ["text"])
    assert app.get(url, params={"namespace": "text"}, headers=reader).json()["graphs"][0]["module"] == "embed"
    assert app.get("/admin/stats", headers=reader).status_code == 403  # the stats stay the admin's


@pytest.mark.parametrize("url", ["/admin/graphs", "/dashboard/graphs"])
def test_one_rule_for_the_cli_and_the_dashboard(app: TestClient, url: str) -> None:
    """A read token limited to a namespace sees that namespace's graphs both ways (``xla-cache graphs``
    reads /admin/graphs, the dashboard /dashboard/graphs), and another namespace's neither way."""
    reader = bearer(app, Role.READ, ["text"])
    mine = app.get(url, params={"namespace": "text"}, headers=reader)
    assert mine.status_code == 200 and [g["module"] for g in mine.json()["graphs"]] == ["embed", "bcast"]
    other = app.get(url, params={"namespace": "vision"}, headers=reader)
    assert (other.status_code, other.json()["error"]) == (403, "forbidden")
    assert "limited to namespaces matching text" in other.json()["detail"]
    assert app.get(url, headers=reader).status_code in (400, 403)  # no namespace: never every namespace


def test_bad_requests_get_a_clear_4xx(app: TestClient) -> None:
    admin = bearer(app, Role.ADMIN)

    def status(params: dict[str, object]) -> tuple[int, str]:
        response = app.get("/admin/graphs", params=params, headers=admin)
        return response.status_code, response.json()["error"]

    assert status({"namespace": "nope"}) == (404, "namespace_not_found")
    assert status({"namespace": "../etc"})[0] == 400
    assert status({"namespace": "x" * 129})[0] == 400
    assert status({})[0] == 400
    assert status({"namespace": "vision", "top": 0})[0] == 400
    assert status({"namespace": "vision", "top": 101})[0] == 400
    assert status({"namespace": "vision", "variants": 5001})[0] == 400
    assert status({"namespace": "vision", "top": "many"})[0] == 400


def test_the_dashboard_reads_it_with_a_read_token(app: TestClient) -> None:
    reader = bearer(app, Role.READ)
    body = app.get("/dashboard/graphs", params={"namespace": "vision"}, headers=reader).json()
    assert [g["module"] for g in body["graphs"]] == ["fuse", "small"]


def test_a_namespace_of_cut_shapes_texts_answers_at_once(app: TestClient) -> None:
    """The third probe's entries (issue 36): shapes texts at the parser's cut, many variants of one graph.
    The report reads at most MAX_GRAPH_SHAPES_TEXT of them and cuts its example."""
    services = services_of(app)
    long = "(" + ", ".join(["f32[4611686018427387904,4611686018427387904]"] * 360) + ", " + CUT_MARKER
    for n in range(200):
        store(services, "cut", f"c{n}", "crafted", f"{n}{long}")
    store(services, "cut", "good", "crafted", "(f32[3]) -> (f32[3])")
    started = time.monotonic()
    response = app.get("/admin/graphs", params={"namespace": "cut"}, headers=bearer(app, Role.ADMIN))
    elapsed = time.monotonic() - started
    assert response.status_code == 200, response.text
    (graph,) = response.json()["graphs"]
    assert graph["variants"] == 201 and graph["read"] * len(long) <= MAX_GRAPH_SHAPES_TEXT + len(long)
    assert len(graph["example"]) <= MAX_EXAMPLE_TEXT + len(CUT_MARKER)
    assert elapsed < 2.0, elapsed


def test_sources_are_counted_over_a_bounded_sample_and_say_so(app: TestClient) -> None:
    """A graph of more entries than the report counts sources over (``SOURCES_READ``): the count is of
    that many, the answer says over how many, and the CLI's line says it is a sample; a small graph's
    count is of all its entries, with nothing added."""
    services = services_of(app)
    wide = SOURCES_READ + 40
    rows = [record("wide", f"w{n:04d}", 10, compile_ms=100) for n in range(wide)]
    EntryRepository(services.database).record_new_entries([*rows, record("wide", "lone", 10, compile_ms=50)])
    GraphRepository(services.database).record_graphs(
        [GraphRecord("wide", r.key, "big", "sig", "(f32[4]) -> (f32[4])") for r in rows]
        + [GraphRecord("wide", "lone", "small", "sig1", "(f32[3]) -> (f32[3])")]
    )
    misses = [{"key": r.key, "source": "jobs/train.py:57"} for r in rows]
    misses.append({"key": "lone", "source": "jobs/eval.py:9"})
    report = run_report("run-wide-0001", namespace="wide", misses=len(misses), new_misses=misses)
    admin = bearer(app, Role.ADMIN)
    assert app.post("/v1/runs", json=report, headers=admin).status_code == 200
    answer = app.get("/admin/graphs", params={"namespace": "wide"}, headers=admin).json()
    graphs = {g["module"]: g for g in answer["graphs"]}
    assert graphs["big"]["entries"] == wide and graphs["big"]["sources_counted"] == SOURCES_READ
    assert graphs["big"]["sources"] == [{"source": "jobs/train.py:57", "entries": SOURCES_READ}]
    assert graphs["small"]["sources_counted"] == 1
    assert graphs["small"]["sources"] == [{"source": "jobs/eval.py:9", "entries": 1}]
    lines = graph_lines(answer)
    assert (
        f"  compiled at jobs/train.py:57 ({SOURCES_READ}) (counted over {SOURCES_READ} of its {wide} entries)"
        in lines
    )
    assert "  compiled at jobs/eval.py:9 (1)" in lines
