"""End to end: the seed's fuse-embedding job (real torch_xla 2.7) has uploaded its graphs; the server has
parsed them; ``xla-cache graphs`` names the two dimensions that vary and the compilations each padding
scheme would leave, checked against what the job ran (the shapes of ``fuse_job.shapes``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.fuse_job import PATCHES_PER_IMAGE
from tests.e2e.fuse_job import shapes as job_shapes
from tests.support.server import LiveServer
from tests.support.torch_xla_jobs import FIRST_JOB_SHAPES, JobResult, run_cli
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

# The paddings, written here apart from the server's, for the counts the report must give.
PADDINGS: dict[str, Callable[[int], int]] = {
    "pow2": lambda n: 0 if n == 0 else 1 << (n - 1).bit_length(),
    "mult8": lambda n: -(-n // 8) * 8,
    "mult64": lambda n: -(-n // 64) * 64,
    "mult128": lambda n: -(-n // 128) * 128,
}


def parsed_report(server: LiveServer, namespace: str, entries: int) -> dict[str, Any]:
    """The namespace's report once the server has parsed ``entries`` entries into graphs."""

    def ready() -> dict[str, Any] | None:
        body = httpx.get(
            f"{server.url}/admin/graphs", params={"namespace": namespace, "top": 100}, timeout=30
        ).json()
        return dict(body) if sum(g["entries"] for g in body["graphs"]) >= entries else None

    return wait_until(ready, timeout=120, interval=0.5, message="the job's entries were not all parsed")


def test_graphs_names_the_fuse_graphs_varying_dimensions_and_what_bucketing_leaves(
    live_server: LiveServer, first_job: tuple[JobResult, Path]
) -> None:
    job, _ = first_job
    namespace = job.warm["namespace"]
    parsed_report(live_server, namespace, FIRST_JOB_SHAPES)
    pairs = job_shapes(FIRST_JOB_SHAPES)
    assert job.data["graphs"] == len(pairs) == FIRST_JOB_SHAPES
    # torch_xla traces a single text token's lookup as another graph: the fuse graph proper is the
    # shapes with two tokens or more, one variant each
    fused = [(images * PATCHES_PER_IMAGE, text) for images, text in pairs if text >= 2]

    table = run_cli(["graphs", namespace, "--server", live_server.url, "--top", "5"])
    assert table.returncode == 0, table.stderr
    print(table.stdout)  # the README shows this output
    done = run_cli(["graphs", namespace, "--server", live_server.url, "--top", "5", "--json"])
    assert done.returncode == 0, done.stderr
    graphs = json.loads(done.stdout)["graphs"]
    assert [g["variants"] for g in graphs] == [len(fused), len(pairs) - len(fused)] == [54, 6]
    fuse = graphs[0]
    assert fuse["read"] == fuse["variants"] and fuse["other_layouts"] == 0
    # exactly two dimensions vary: the image patches' rows and the text tokens, each its parameter's first
    rows, tokens = sorted({r for r, _ in fused}), sorted({t for _, t in fused})
    by_values = {tuple(d["values"]): d for d in fuse["varying"]}
    assert len(fuse["varying"]) == 2 and set(by_values) == {tuple(rows), tuple(tokens)}
    for dim, values in ((by_values[tuple(rows)], rows), (by_values[tuple(tokens)], tokens)):
        assert dim["label"] == f"p{dim['param']}.d0" and dim["dim"] == 0
        assert (dim["count"], dim["min"], dim["max"]) == (len(values), values[0], values[-1])
    assert by_values[tuple(rows)]["param"] != by_values[tuple(tokens)]["param"]
    left = {name: len({(pad(r), pad(t)) for r, t in fused}) for name, pad in PADDINGS.items()}
    assert {s["scheme"]: s["variants"] for s in fuse["schemes"]} == left
    assert left == {"pow2": 20, "mult8": 8, "mult64": 2, "mult128": 2}  # 54 compilations down to these
    # the table says the same, on the fuse graph's line
    line = next(line for line in table.stdout.splitlines() if line.startswith(fuse["module"] + " "))
    assert f"{len(fused)} variants" in line
    for dim in fuse["varying"]:
        assert f"{dim['label']} ({dim['min']}..{dim['max']}, {dim['count']} values)" in line
    for name, count in left.items():
        assert f"{name}: {count} (+" in line
    # the single-token graph: only the rows vary
    single = graphs[1]
    assert [d["values"] for d in single["varying"]] == [rows]
