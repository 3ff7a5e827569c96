"""Steps, not modules, and counts that are true (issue 46, items 1 and 3), on real torch_xla 2.7 CPU entries
of the seed's fuse step made small (``fixtures/torch_xla_2.7_cpu_fuse``, see its generator): every compile
count the report gives is checked against a count worked out here from the job's own list of sizes, on
groups of 6 and 13 entries; the entries at an edge (an empty slice drops an op) are one step with the others
and ``baked_sizes``, never ``different_key``; and the report reads summary first."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cache_server.graphs.baked import baked_group_of, edge_ops
from cache_server.graphs.report import baked_report
from cache_server.graphs.steps import StepGraph, group_steps
from cache_server.parsing.body import Body
from cache_server.parsing.hlo import GraphInfo, parse_entry
from cache_server.wiring import Services
from tests.support.api import put_ok
from tests.support.padded_counts import choice_padding, distinct_after
from tests.support.run_reports import run_report
from xla_cache.cli.graphs import graph_lines

FIXTURES = Path(__file__).parent / "fixtures"
FUSE = FIXTURES / "torch_xla_2.7_cpu_fuse"
SEQ = 24  # the generator's fused row length: each sample pads SEQ - image tokens - text length rows
MANIFEST: dict[str, list[list[int]]] = json.loads((FUSE / "manifest.json").read_text())
INSIDE = [name for name in MANIFEST if name < "b13"]  # every slice neither empty nor whole: one structure
EDGE = [name for name in MANIFEST if name >= "b13"]  # an empty slice, or two paddings of one size


def parsed(name: str) -> GraphInfo:
    info = parse_entry([(FUSE / name).read_bytes()])
    assert info is not None and info.body is not None
    return info


def body(name: str) -> Body:
    found = parsed(name).body
    assert found is not None
    return found


def job_sizes(name: str) -> tuple[int, ...]:
    """The sizes the job baked into entry ``name``, from its own ints: per sample where the image starts,
    its tokens, the text length and the padding that follows."""
    return tuple(
        size for start, image, text in MANIFEST[name] for size in (start, image, text, SEQ - image - text)
    )


@pytest.mark.parametrize("count", [6, 13])
def test_every_compile_count_is_the_count_of_the_jobs_own_sizes(count: int) -> None:
    names = INSIDE[:count]
    group = baked_group_of([(parsed(n).shapes, body(n)) for n in names])
    assert group is not None and group.entries == count
    report = baked_report(group)
    jobs = [job_sizes(n) for n in names]
    varying = [i for i in range(len(jobs[0])) if len({sizes[i] for sizes in jobs}) > 1]
    # each size the report names is one of the job's sizes, entry by entry; every one of those is named
    # or moves on a line with one named (a slice's start that is the previous slice's limit)
    places = []
    for point_column in zip(*group.points, strict=True):
        (place,) = [i for i in varying if tuple(sizes[i] for sizes in jobs) == point_column]
        places.append(place)
    assert sum(1 + axis.folded for axis in group.axes) >= len(varying) == len(places)
    as_is = len(set(jobs))
    assert as_is == count
    for place, axis in zip(places, report.analysis.axes, strict=True):
        for choice in axis.choices:
            assert choice.compiles == distinct_after(jobs, {place: choice_padding(choice)}), (
                axis.label,
                choice,
            )
    for line in report.analysis.frontier:
        pads = {}
        for place, axis, name in zip(places, report.analysis.axes, line.choices, strict=True):
            pads[place] = choice_padding(next(c for c in axis.choices if c.name == name))
        assert line.compiles == distinct_after(jobs, pads), line
    assert report.analysis.frontier[0].compiles == 1 and report.analysis.frontier[-1].compiles == as_is


def test_a_size_is_folded_only_where_padding_its_leader_carries_it() -> None:
    """On 6 entries whose first size took 6 values, every other size is a function of it; only those on a
    line with it (none here: the samples' sizes are drawn apart) are folded, so padding it alone leaves the
    6 compiles the other sizes make (issue 46: 'max(58) 1' where 6 were left)."""
    names = INSIDE[:6]
    group = baked_group_of([(parsed(n).shapes, body(n)) for n in names])
    assert group is not None
    lead = max(group.axes, key=lambda axis: len(axis.values))
    assert len(lead.values) == 6  # every other size is a function of this one on these entries
    assert lead.folded == 0
    folded = [axis for axis in group.axes if axis.folded]
    # the one fold per sample: the text slice's start is the previous slice's limit (the image's start)
    assert len(folded) == 2 and all(axis.op.opcode == "slice" for axis in folded)


def test_an_edge_size_drops_an_op_and_its_module_is_the_same_step() -> None:
    inside, jax = body("b00"), parse_entry([(FIXTURES / "jax_0.10.2_cpu_baked" / "n3-rows16").read_bytes()])
    for name in EDGE:
        found = edge_ops(body(name), inside)
        assert found is not None and not found.ours and 1 <= len(found.theirs) <= 2, name
        assert found.describe().startswith("this size drops an op: ")
    assert jax is not None and jax.body is not None and edge_ops(jax.body, inside) is None
    # as torch_xla named the seed's modules: one per op count (SyncTensorsGraph.53 to .57)
    graphs = [
        StepGraph(f"SyncTensorsGraph.{50 + i}", 2.0, 3, frozenset({parsed(n).shapes}), None, body(n))
        for i, n in enumerate(["b00", *EDGE])
    ]
    graphs.insert(2, StepGraph("jit_baked_step", 9.0, 1, frozenset({jax.shapes}), None, jax.body))
    elsewhere = StepGraph("SyncTensorsGraph.99", 1.0, 1, graphs[0].shapes, "other.py:3", body("b01"))
    graphs[0] = replace(graphs[0], source="fuse.py:12")
    steps = group_steps([*graphs, elsewhere])
    assert [(s.modules, s.compiles, s.compile_seconds) for s in steps] == [
        (("SyncTensorsGraph.50", *(f"SyncTensorsGraph.{51 + i}" for i in range(len(EDGE)))), 15, 10.0),
        (("jit_baked_step",), 1, 9.0),
        (("SyncTensorsGraph.99",), 1, 1.0),  # traced at another line: another step
    ]
    assert steps[0].edge is not None and steps[0].why is not None
    assert steps[0].why.startswith("this size drops an op: ")
    # traced at one line, one input shape: one step whatever their ops (one row's gather turns into a
    # dynamic-slice); with no line known, ops that do not align are two steps
    at_one_line = [
        StepGraph(name, 1.0, 1, frozenset({"(f32[4]) -> f32[4]"}), source, found)
        for name, found in (("a", body("b00")), ("b", jax.body))
        for source in ["fuse.py:60"]
    ]
    (joined,) = group_steps(at_one_line)
    assert (
        joined.modules == ("a", "b")
        and joined.why == "traced at one line (fuse.py:60), a size there changes its ops"
    )
    unknown = [replace(g, source=None) for g in at_one_line]
    assert [s.modules for s in group_steps(unknown)] == [("a",), ("b",)]
    # with no debug setting: the line of the mark_step() the job's runs compiled both at (issue 46 item 4)
    synced = [replace(g, call_site="fuse.py:165") for g in unknown]
    (joined,) = group_steps(synced)
    assert (
        joined.modules == ("a", "b")
        and joined.why == "compiled by one sync at fuse.py:165, a size there changes its ops"
    )
    apart = [synced[0], replace(synced[1], call_site="eval.py:12")]
    assert [s.modules for s in group_steps(apart)] == [("a",), ("b",)]


# -- through the server ----------------------------------------------------------------------------------
NS = "fuse-job"


def test_the_fuse_step_is_one_step_its_edges_baked_sizes_its_counts_the_jobs(
    client: TestClient, services: Services
) -> None:
    names = list(MANIFEST)
    for name in names:
        put_ok(client, NS, f"key-{name}", (FUSE / name).read_bytes(), compile_ms=500)
    assert services.parsing.wait_idle(30)
    misses: list[dict[str, Any]] = [
        {"key": f"key-{n}", "module": None, "compile_seconds": 0.5} for n in names
    ]
    body = run_report("run-fuse-0001", namespace=NS, misses=len(names), new_misses=misses)
    assert client.post("/v1/runs", json=body).status_code == 200
    detail = client.get("/admin/runs/run-fuse-0001").json()
    reasons = {m["key"].removeprefix("key-"): (m["reason"], m["detail"]) for m in detail["misses"]}
    assert reasons[names[0]][0] == "new_graph"
    assert {reason for reason, _ in reasons.values()} == {"new_graph", "baked_sizes"}  # no different_key
    for name in EDGE:
        assert "this size drops an op" in reasons[name][1], reasons[name]
    # a run of the edge sizes alone: compared with the entries other runs stored
    edges = [m for m in misses if m["key"].removeprefix("key-") in EDGE]
    body = run_report("run-fuse-0002", namespace=NS, misses=len(edges), new_misses=edges)
    assert client.post("/v1/runs", json=body).status_code == 200
    again = client.get("/admin/runs/run-fuse-0002").json()["misses"]
    assert [m["reason"] for m in again] == ["baked_sizes"] * len(EDGE)
    assert all("this size drops an op" in m["detail"] for m in again)

    report = client.get("/admin/graphs", params={"namespace": NS}).json()
    (step,) = report["steps"]
    assert step["modules"] == ["SyncTensorsGraph.37"]
    assert step["compiles"] == len({json.dumps(batch) for batch in MANIFEST.values()}) == len(names)
    assert step["compile_seconds"] == pytest.approx(0.5 * len(names))
    (graph,) = report["graphs"]
    baked = graph["baked_sizes"]
    assert baked["entries"] == len(INSIDE)  # the commonest structure: every size inside
    jobs = [job_sizes(n) for n in INSIDE]
    sizes = sum(1 + size["folded"] for size in baked["sizes"])
    assert len(set(jobs)) == len(INSIDE) and baked["frontier"][-1]["compiles"] == len(INSIDE)
    summary = f"pad all {sizes} sizes to their maximum: 1 compile instead of {len(INSIDE)}, +"
    assert baked["summary"].startswith(summary) and "pass them as data" in baked["summary"]
    assert graph["summary"] == baked["summary"] == step["fix"]
    assert any(v.startswith(f"{sizes} sizes inside the graph") for v in step["varies"])

    lines = graph_lines(report)
    assert lines[0].startswith(f"namespace {NS}: its steps, the costliest first")
    assert lines[1].startswith(f"  1. SyncTensorsGraph.37  {0.5 * len(names):.1f} s compiling, {len(names)} ")
    assert lines[3] == f"     what to do: {step['fix']}"  # the summary before any table
    at = lines.index(next(line for line in lines if line.startswith("  sizes baked into the graph")))
    assert lines[at - 1] == f"  what to do: {graph['summary']}"  # said once, before the sizes
    # padding any one size alone leaves every compile (the others still differ): one line for them all
    assert all(c["compiles"] == len(INSIDE) for s in baked["sizes"] for c in s["choices"])
    assert lines[at + 1].startswith(
        f"    {len(baked['sizes'])} sizes padded alone change nothing ({len(INSIDE)} compiles left: "
    )
    assert not any("more follow from it" in line for line in lines)


def test_grouping_aligns_a_bounded_number_of_ops_however_many_graphs_share_a_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """100 graphs at one input shape, each of another structure with 500 sized ops: the pairs aligned stop
    at STEP_ALIGNED_OPS ops, and every graph is still listed in one step."""
    from cache_server.graphs import steps as steps_module
    from cache_server.parsing.body import SizedOp

    aligned: list[int] = []
    real = edge_ops

    def counted(ours: Body, theirs: Body) -> Any:
        aligned.append(len(ours.ops) + len(theirs.ops))
        return real(ours, theirs)

    monkeypatch.setattr(steps_module, "edge_ops", counted)
    ops = tuple(SizedOp(i, "slice", f"slice.{i}", {"limit": [float(i)]}, "f32[4]") for i in range(500))
    graphs = [
        StepGraph(f"m{i}", 1.0, 1, frozenset({"(f32[4]) -> f32[4]"}), None, Body(f"s{i}", "", "", 600, ops))
        for i in range(100)
    ]
    found = steps_module.group_steps(graphs)
    assert 0 < sum(aligned) <= steps_module.STEP_ALIGNED_OPS
    assert sorted(m for step in found for m in step.modules) == sorted(g.module for g in graphs)
