"""End to end: the seed's fuse-embedding job (real torch_xla 2.7) has uploaded its graphs; the server has
parsed them; ``xla-cache graphs`` names the two dimensions that vary, the ways to pad each (and to pad both
to their maximum) and the compilations each would leave, checked against counts made here from what the
job ran (the shapes of ``fuse_job.shapes``): the 60-shape first job, and a seed-like job of 300 shapes at
sequence length 128 on a server of its own."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.fuse_job import PATCHES_PER_IMAGE
from tests.e2e.fuse_job import shapes as job_shapes
from tests.support.server import LiveServer, run_server
from tests.support.torch_xla_jobs import FIRST_JOB_SHAPES, JobResult, run_cli, run_job
from tests.support.wait import QUIET_POLL, wait_until

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

    return wait_until(
        ready, timeout=120, interval=QUIET_POLL, message="the job's entries were not all parsed"
    )


def check_per_dimension_choices(fuse: dict[str, Any], fused: list[tuple[int, int]]) -> None:
    """Each varying dimension's choices and the frontier's ends, against counts made from the job's own
    (rows, tokens) list: padding one dimension leaves the distinct (padded rows, tokens) pairs, or (rows,
    padded tokens); padding both to their maximum leaves one compilation."""
    rows, tokens = sorted({r for r, _ in fused}), sorted({t for _, t in fused})
    by_values = {tuple(d["values"][:32]): d for d in fuse["varying"]}
    dims = {"rows": by_values[tuple(rows[:32])], "tokens": by_values[tuple(tokens[:32])]}
    for which, dim in dims.items():
        index = 0 if which == "rows" else 1
        top = max(pair[index] for pair in fused)
        choices = {c["name"]: c for c in dim["choices"]}
        assert choices["as is"]["compiles"] == len(fused)
        assert (choices["max"]["sizes"], choices["max"]["boundaries"]) == (1, [top])
        assert choices["max"]["compiles"] == len({pair[1 - index] for pair in fused})
        for name, pad in PADDINGS.items():
            left = {(pad(a), b) if index == 0 else (a, pad(b)) for a, b in fused}
            if name in choices:
                assert choices[name]["compiles"] == len(left), (which, name)
            else:  # not offered: it merges no size, or pads every size to the maximum
                sizes = {pad(pair[index]) for pair in fused}
                assert len(sizes) == len(rows if index == 0 else tokens) or sizes == {pad(top)}, (which, name)
        for name, choice in choices.items():
            if name.startswith("buckets"):
                tops = choice["boundaries"]
                assert tops[-1] == top and len(tops) <= int(name[len("buckets") :])

                def bucket(size: int, tops: list[int] = tops) -> int:
                    return min(t for t in tops if t >= size)

                left = {(bucket(a), b) if index == 0 else (a, bucket(b)) for a, b in fused}
                assert choice["compiles"] == len(left), (which, name)
    frontier = fuse["frontier"]
    assert frontier[0]["description"] == "all max" and frontier[0]["compiles"] == 1
    assert frontier[-1]["description"] == "all as is" and frontier[-1]["compiles"] == len(fused)
    assert fuse["cost"] == "bytes of the padded parameters"
    # its results (f32[rows,32], f32[tokens,32], f32[rows+tokens,32], f32[seq,32]) pad with the sizes
    assert fuse["result_cost"] == "bytes of the padded results"
    assert frontier[0]["result_mean_overhead"] > 0 and frontier[-1]["result_mean_overhead"] == 0


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
    print(table.stdout)  # docs/user-guide.md shows this output
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
    check_per_dimension_choices(fuse, fused)
    # the table says the same, in the fuse graph's lines
    lines = table.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(fuse["module"] + " "))
    cost = f"{fuse['compile_seconds']:.1f} s compiling, {fuse['entries']} compiles, {len(fused)} variants"
    assert lines[start] == f"{fuse['module']}  {cost}"
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    block = "\n".join(lines[start + 1 : end])
    # first the mark_step that compiled all 54, then the advice, then the dimensions and their combinations
    assert lines[start + 1].startswith("  compiled at ") and lines[start + 1].endswith(" (54)")
    assert "fuse_job.py:" in lines[start + 1] and lines[start + 2].startswith("  what to do: ")
    for dim in fuse["varying"]:
        assert f"  {dim['label']} ({dim['min']}..{dim['max']}, {dim['count']} values): as is 54" in block
        assert f"max({dim['max']}) " in block
    assert "all max" in block and "all as is" in block
    rounding = next(line for line in lines[start:] if line.startswith("  one rounding for every dimension: "))
    for name, count in left.items():
        assert f"{name}: {count} (+" in rounding
    # the single-token graph: only the rows vary
    single = graphs[1]
    assert [d["values"] for d in single["varying"]] == [rows]


def test_a_seed_like_job_of_300_shapes_gets_per_dimension_choices(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The seed workload's shapes at sequence length 128 (300 of them: 0, 1 or 2 images, 1 to 128 text
    tokens), on a server of its own (the same runtime's namespace as the first job's)."""
    pairs = job_shapes(300, 128)
    with run_server(tmp_path_factory.mktemp("seed-300")) as server:
        cache = tmp_path_factory.mktemp("seed-300-cache")
        job = run_job(
            ["--server", server.url, "--cache-dir", str(cache), "--shapes", "300", "--seq-len", "128"]
        )
        assert job.data["graphs"] == len(pairs) == 300
        namespace = job.warm["namespace"]
        parsed_report(server, namespace, 300)
        done = run_cli(["graphs", namespace, "--server", server.url, "--top", "3", "--json"])
        assert done.returncode == 0, done.stderr
        table = run_cli(["graphs", namespace, "--server", server.url, "--top", "3"])
        print(table.stdout)
    fused = [(images * PATCHES_PER_IMAGE, text) for images, text in pairs if text >= 2]
    fuse = json.loads(done.stdout)["graphs"][0]
    assert fuse["variants"] == fuse["read"] == len(fused) == 297 and fuse["other_layouts"] == 0
    check_per_dimension_choices(fuse, fused)
    # by hand: tokens to multiples of 64, rows as they are: 64 and 128 with 0 or 4 rows, 64 only with 8
    # (at most 48 tokens fit beside 2 images)
    tokens = next(d for d in fuse["varying"] if d["max"] == 128)
    assert next(c for c in tokens["choices"] if c["name"] == "mult64")["compiles"] == 5
    assert f"{fuse['module']}  {fuse['compile_seconds']:.1f} s compiling, " in table.stdout
    assert f", {fuse['entries']} compiles, 297 variants" in table.stdout
