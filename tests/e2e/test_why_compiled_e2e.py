"""Why a torch_xla 2.7 job compiled, end to end: real jobs report their runs to a real ``xla-cache-server``
process of this module's own (an empty namespace), and the server explains each compile.

The first job runs two fuse-embedding shapes: its first compile is a new graph, its second new shapes of
it. The next job runs one shape more: the shapes it downloaded load, and its one compile is new shapes of
the known graph, naming the parameter dimensions that differ from the nearest stored variant.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.fuse_job import shapes as fuse_shapes
from tests.support.padded_counts import choice_padding, distinct_after
from tests.support.run_reports import explained_run
from tests.support.server import LiveServer, run_server
from tests.support.torch_xla_jobs import run_job
from xla_cache.cli import main

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server of its own: the session's server already holds the first job's graphs."""
    with run_server(tmp_path_factory.mktemp("why-server")) as server:
        yield server


def test_a_first_run_compiles_new_graphs_and_the_next_new_shapes_naming_the_dimensions(
    own_server: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_job(["--server", own_server.url, "--cache-dir", str(tmp_path / "A"), "--shapes", "2"])
    assert first.counters["UncachedCompile"] == 2
    detail = explained_run(own_server.url, first.warm["run_id"])
    assert detail["framework"] == "torch_xla" and detail["misses_total"] == 2
    one, two = detail["misses"]
    assert one["reason"] == "new_graph" and one["module"]  # the module as parsed from the stored bytes
    assert f"no entry of module {one['module']}" in one["detail"]
    assert two["reason"] == "new_shapes" and two["module"] == one["module"] and two["dimensions"]
    # where the job compiled each, with no debug setting: the line of its mark_step() in fuse_job.py
    assert one["source"] == two["source"] and one["source"] in mark_step_sites()

    second = run_job(["--server", own_server.url, "--cache-dir", str(tmp_path / "B"), "--shapes", "3"])
    assert second.counters["PersistentCacheHit"] == 2 and second.counters["UncachedCompile"] == 1
    detail = explained_run(own_server.url, second.warm["run_id"])
    (miss,) = detail["misses"]
    assert (miss["reason"], miss["module"]) == ("new_shapes", one["module"])
    assert miss["dimensions"] and miss["nearest_key"] in {one["key"], two["key"]}
    for dim in miss["dimensions"]:
        assert dim["ours"] != dim["theirs"]
        assert f"parameter {dim['param']} dimension {dim['dim']}: {dim['ours']}" in miss["detail"]
    capsys.readouterr()
    assert main(["runs", "--server", own_server.url, second.warm["run_id"]]) == 0
    out = capsys.readouterr().out
    print(out, file=sys.stderr)  # kept in the test's log: docs/user-guide.md quotes this output
    assert "hits         2" in out and "new_shapes" in out and miss["detail"] in out
    assert f"(at {one['source']})" in out
    answer = httpx.get(
        f"{own_server.url}/admin/graphs", params={"namespace": detail["namespace"]}, timeout=30
    )
    graph = next(g for g in answer.json()["graphs"] if g["module"] == one["module"])
    assert graph["sources"] == [{"source": one["source"], "entries": 3}]  # its three compiles, one line


def mark_step_sites() -> set[str]:
    """``e2e/fuse_job.py:N`` for each line of fuse_job.py that calls ``xm.mark_step()``."""
    lines = (Path(__file__).parent / "fuse_job.py").read_text().splitlines()
    return {f"e2e/fuse_job.py:{n}" for n, line in enumerate(lines, 1) if "xm.mark_step()" in line}


def first_params(misses: list[dict[str, Any]]) -> str:
    """The parameters' part of the misses' one shapes text."""
    return str(misses[0]["shapes"]).rpartition(") -> ")[0] + ")"


def test_sizes_from_python_integers_are_baked_sizes_naming_the_op_its_line_and_the_sizes(
    own_server: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The seed's own pattern: the step slices inputs of one padded shape by Python integers, so every size
    is a new graph at the same input shapes. Its compiles are baked_sizes (not different_key), naming the
    slice, the line of fuse_job.py that made it (XLA_HLO_DEBUG=1 puts source lines in the metadata), and
    the sizes, with the advice to pass sizes as data, pad or go eager."""
    args = ["--shapes", "5", "--seq-len", "128", "--baked"]
    job = run_job(
        ["--server", own_server.url, "--cache-dir", str(tmp_path / "A"), *args], env={"XLA_HLO_DEBUG": "1"}
    )
    shapes = fuse_shapes(5, 128)  # no image, text 1..5: no slice is empty in one step and whole in another
    assert job.counters["UncachedCompile"] == len(shapes)
    detail = explained_run(own_server.url, job.warm["run_id"])
    misses = detail["misses"]
    reasons = [miss["reason"] for miss in misses]
    # a size at an edge (one text id: a gather of one row) is another graph; every other size is baked
    assert set(reasons) == {"new_graph", "baked_sizes"} and reasons.count("baked_sizes") >= 3, reasons
    assert len({miss["shapes"] for miss in misses}) == 1  # one input shape throughout
    for miss, (_, text) in zip(misses, shapes, strict=True):
        if miss["reason"] != "baked_sizes":
            continue
        named = {(b["opcode"], b["attribute"], b["index"]): b for b in miss["baked_sizes"]}
        limit = named[("slice", "limit", 0)]  # ids[:text]
        assert limit["ours"] == text and limit["theirs"] in {t for _, t in shapes} - {text}
        assert limit["source"] and "fuse_job.py:" in limit["source"]
        assert f"limit[0] {text} (stored: {int(limit['theirs'])})" in miss["detail"]
        assert "Python integers" in miss["advice"]
    capsys.readouterr()
    prefix = job.warm["run_id"][:12]  # as `xla-cache runs` lists it
    assert main(["runs", "--server", own_server.url, prefix, "--all"]) == 0
    out = capsys.readouterr().out
    print(out, file=sys.stderr)  # kept in the test's log: docs/user-guide.md quotes this output
    assert "baked_sizes" in out and "pass the sizes as data" in out
    counts = ", ".join(f"{r} {reasons.count(r)}" for r in ("new_graph", "baked_sizes"))
    assert f"reasons      {counts}" in out
    module = next(m["module"] for m in misses if m["reason"] == "baked_sizes")
    assert f"xla-cache graphs {detail['namespace']} --module {module}" in out

    # the graphs report lists the sizes baked into the graph, their values, and pad-to-maximum: 1 compile
    baked_texts = {
        text for miss, (_, text) in zip(misses, shapes, strict=True) if miss["reason"] == "baked_sizes"
    }
    module = next(miss["module"] for miss in misses if miss["reason"] == "baked_sizes")
    namespace = detail["namespace"]
    answer = httpx.get(f"{own_server.url}/admin/graphs", params={"namespace": namespace}, timeout=30)
    assert answer.status_code == 200, answer.text
    graph = next(g for g in answer.json()["graphs"] if g["module"] == module)
    # one story per step (issue 46, items 1 and 3): the fuse step first, its compiles those the job made
    step = answer.json()["steps"][0]
    # its modules one step: the edge (one text id: a dynamic-slice, not a gather) traced at the same line
    assert sorted(step["modules"]) == sorted({miss["module"] for miss in misses})
    assert step["compiles"] == len(shapes) == len(misses)
    assert step["fix"] == graph["summary"] and "1 compile instead of" in step["fix"]
    baked = graph["baked_sizes"]
    assert baked is not None and graph["variants"] == 1 and baked["params"] == first_params(misses)
    limit = next(size for size in baked["sizes"] if (size["opcode"], size["attribute"]) == ("slice", "limit"))
    # the entries of the graph's structure: every baked compile and the one it was compared with first
    assert set(limit["values"]) >= baked_texts and len(limit["values"]) == baked["entries"]
    assert limit["source"] and "fuse_job.py:" in limit["source"]
    assert limit["choices"][0]["name"] == "as is" and limit["choices"][-1]["name"] == "max"
    assert limit["choices"][-1]["compiles"] == 1 and limit["choices"][-1]["boundaries"] == [
        max(limit["values"])
    ]
    # every count the report gives is the count of the job's own sizes padded so (the text lengths)
    jobs = [(text,) for miss, (_, text) in zip(misses, shapes, strict=True) if miss["module"] == module]
    assert len(jobs) == baked["entries"]
    for choice in limit["choices"]:
        assert choice["compiles"] == distinct_after(jobs, {0: choice_padding(choice)}), choice
    first, last = baked["frontier"][0], baked["frontier"][-1]
    assert first["compiles"] == 1 and first["description"].endswith("max")
    assert last["compiles"] == baked["entries"]
    capsys.readouterr()
    assert main(["graphs", "--server", own_server.url, namespace, "--module", module]) == 0
    out = capsys.readouterr().out
    print(out, file=sys.stderr)  # kept in the test's log: docs/user-guide.md quotes this output
    assert "sizes baked into the graph" in out and "max(" in out
