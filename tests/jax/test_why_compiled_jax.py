"""Why a JAX job compiled, end to end: real JAX 0.10 jobs report their runs to a real ``xla-cache-server``
process, and the server explains each compile (``GET /admin/runs/{id}``, ``xla-cache runs RUN_ID``).

Job A compiles shapes 1 and 2 of ``jit_step`` in an empty namespace; job C in A's namespace runs shape 3
(new shapes of the same module, the rows differ); job D runs A's shapes with a per-call compiler option
(another compile_options component, same namespace); job E recompiles an entry an admin deleted (evicted,
with when and the policy); a job killed with SIGKILL keeps the run report its periodic reports sent.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.jax_jobs import JOB, jax_env, run_jax_job
from tests.support.run_reports import explained_run
from tests.support.server import LiveServer
from tests.support.wait import QUIET_POLL, wait_until
from xla_cache.cli import main

SHAPES = 2  # job A: x of 1x4 and 2x4
FAST_MATH = "xla_cpu_enable_fast_math=true"


def cli_run(server: LiveServer, run_id: str, capsys: pytest.CaptureFixture[str], *more: str) -> str:
    capsys.readouterr()
    assert main(["runs", "--server", server.url, run_id, *more]) == 0
    out = capsys.readouterr().out
    print(out, file=sys.stderr)  # kept in the test's log: docs/user-guide.md quotes this output
    return out


def job(server: LiveServer, directory: Path, *more: str) -> dict[str, Any]:
    result, _ = run_jax_job(["--server", server.url, "--cache-dir", str(directory), *more])
    return result


@pytest.fixture(scope="module")
def job_a(live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return job(live_server, tmp_path_factory.mktemp("A"), "--shapes", str(SHAPES))


def test_a_first_run_compiles_a_new_graph_then_new_shapes_of_it(
    live_server: LiveServer, job_a: dict[str, Any]
) -> None:
    detail = explained_run(live_server.url, job_a["warm"]["run_id"])
    assert detail["framework"] == "jax" and detail["namespace"] == job_a["warm"]["namespace"]
    assert detail["misses_total"] == SHAPES and detail["hits"] == 0 and detail["ended_at"] is not None
    first, second = detail["misses"]  # in the order compiled: 1x4, then 2x4
    assert (first["module"], first["reason"]) == ("jit_step", "new_graph")
    assert (second["module"], second["reason"]) == ("jit_step", "new_shapes")
    assert second["nearest_key"] == first["key"]


def test_new_shapes_of_a_known_module_name_the_dimension(
    live_server: LiveServer, job_a: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = job(live_server, tmp_path / "C", "--first-shape", "3", "--shapes", "1")
    assert c["warm"]["namespace"] == job_a["warm"]["namespace"]
    assert c["warm"]["downloaded_entries"] == SHAPES and c["misses"] == 1
    detail = explained_run(live_server.url, c["warm"]["run_id"])
    (miss,) = detail["misses"]
    assert (miss["module"], miss["reason"]) == ("jit_step", "new_shapes")
    # the nearest stored variant is A's 2x4: the first parameter's dimension 0 differs, 3 against 2
    assert [(d["param"], d["dim"], d["ours"], d["theirs"]) for d in miss["dimensions"]] == [(0, 0, 3, 2)]
    assert "3" in miss["detail"] and "2" in miss["detail"]
    out = cli_run(live_server, c["warm"]["run_id"], capsys)
    assert "compiles     1;" in out and "new_shapes" in out and miss["detail"] in out


def test_a_per_call_compiler_option_is_a_different_key_in_compile_options(
    live_server: LiveServer, job_a: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = job(live_server, tmp_path / "D", "--shapes", str(SHAPES), "--compiler-option", FAST_MATH)
    assert d["warm"]["namespace"] == job_a["warm"]["namespace"]  # a per-call option: not in the namespace
    assert d["misses"] == SHAPES and d["hits"] == 0
    detail = explained_run(live_server.url, d["warm"]["run_id"])
    assert detail["misses_total"] == SHAPES
    for miss in detail["misses"]:
        assert (miss["module"], miss["reason"]) == ("jit_step", "different_key"), miss
        assert [c["component"] for c in miss["differing_components"]] == ["compile_options"], miss
        assert "compile_options" in miss["detail"]
    out = cli_run(live_server, d["warm"]["run_id"], capsys)
    listed, _, advice = out.partition("what to do:")
    assert f"reasons      different_key {SHAPES}" in listed
    listed = listed.partition("misses (")[2]
    assert listed.count("different_key") == SHAPES and "compile_options" in listed
    assert "different_key" in advice  # what to do about it, once


def test_a_static_python_integer_is_baked_sizes_naming_the_slice_its_line_and_the_sizes(
    live_server: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The seed's pattern in JAX: ``x[:n]`` padded back, ``n`` static. Every n is a new graph at the same
    input shape; after the first, each compile is baked_sizes (not different_key) naming the slice, its
    line in jax_job.py (from the module's stack frames) and the sizes."""
    ns = list(range(3, 13))
    b = job(live_server, tmp_path / "B", "--baked", "--first-shape", str(ns[0]), "--shapes", str(len(ns)))
    detail = explained_run(live_server.url, b["warm"]["run_id"])
    misses = [m for m in detail["misses"] if m["module"] == "jit_baked_step"]
    assert len(misses) == len(ns) and len({m["shapes"] for m in misses}) == 1
    assert [m["reason"] for m in misses] == ["new_graph"] + ["baked_sizes"] * (len(ns) - 1)
    for miss, n in zip(misses[1:], ns[1:], strict=True):
        named = {(c["opcode"], c["attribute"], c["index"]): c for c in miss["baked_sizes"]}
        limit = named[("slice", "limit", 0)]
        assert limit["ours"] == n and limit["theirs"] in set(ns) - {n}
        assert limit["source"] and "jax_job.py:" in limit["source"] and "slice" in (limit["op_name"] or "")
        assert f"limit[0] {n} (stored: {int(limit['theirs'])})" in miss["detail"]
    out = cli_run(live_server, b["warm"]["run_id"], capsys)
    listed, _, advice = out.partition("what to do:")
    listed = listed.partition("misses (")[2]
    assert listed.count("baked_sizes") == len(ns) - 1 and "pass the sizes as data" in advice

    # the graphs report: the slice's limit took every n; padded to its maximum, one compilation
    answer = httpx.get(
        f"{live_server.url}/admin/graphs", params={"namespace": detail["namespace"], "top": 100}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    graph = next(g for g in answer.json()["graphs"] if g["module"] == "jit_baked_step")
    baked = graph["baked_sizes"]
    assert baked is not None and baked["entries"] == len(ns)
    limit = next(size for size in baked["sizes"] if (size["opcode"], size["attribute"]) == ("slice", "limit"))
    assert limit["values"] == ns and limit["folded"] >= 1
    (pad_to_max,) = [c for c in limit["choices"] if c["name"] == "max"]
    assert pad_to_max["compiles"] == 1 and pad_to_max["boundaries"] == [max(ns)]
    assert baked["frontier"][0]["compiles"] == 1


def test_an_evicted_entry_recompiled_says_when_and_by_which_policy(
    live_server: LiveServer, job_a: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    namespace = job_a["warm"]["namespace"]
    a_misses = explained_run(live_server.url, job_a["warm"]["run_id"])["misses"]
    evicted = a_misses[0]["key"]  # A's 1x4 entry
    deleted = httpx.delete(f"{live_server.url}/v1/namespaces/{namespace}/entries/{evicted}", timeout=30)
    assert deleted.status_code in (200, 204), deleted.text

    e = job(live_server, tmp_path / "E", "--shapes", "1")  # 1x4 again
    assert e["misses"] == 1
    detail = explained_run(live_server.url, e["warm"]["run_id"])
    (miss,) = detail["misses"]
    assert miss["key"] == evicted
    assert (miss["reason"], miss["policy"]) == ("evicted", "admin") and miss["removed_at"]
    assert "policy admin" in miss["detail"]
    out = cli_run(live_server, e["warm"]["run_id"], capsys)
    assert "evicted" in out and "policy admin" in out


def test_a_job_killed_mid_run_leaves_its_report_and_misses(
    live_server: LiveServer, job_a: dict[str, Any], tmp_path: Path
) -> None:
    args = ["--server", live_server.url, "--cache-dir", str(tmp_path / "K")]
    args += ["--first-shape", "20", "--shapes", "2", "--then-wait"]
    with subprocess.Popen(
        [sys.executable, str(JOB), *args],
        env=jax_env({"XLA_CACHE_REPORT_INTERVAL": "1"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as running:
        try:
            assert running.stdout is not None and running.stdout.readline().strip() == "COMPILED"

            def reported() -> str | None:
                runs = httpx.get(f"{live_server.url}/admin/runs", params={"limit": 50}, timeout=30).json()
                for run in runs["runs"]:
                    if run["misses"] == 2 and run["ended_at"] is None:
                        return str(run["run_id"])
                return None

            run_id = wait_until(reported, timeout=60, message="no report carried the job's compiles")
            # and its uploader sent the two entries (the server reads their shapes from the bytes)
            wait_until(
                lambda: all(m["shapes"] for m in explained_run(live_server.url, run_id)["misses"]),
                timeout=60,
                interval=QUIET_POLL,
                message="the job's entries were not uploaded",
            )
        finally:
            running.send_signal(signal.SIGKILL)
            running.wait(timeout=30)
    assert running.returncode == -signal.SIGKILL
    detail = explained_run(live_server.url, run_id)
    assert detail["ended_at"] is None and detail["misses_total"] == 2 and detail["compile_seconds"] > 0
    assert all(m["module"] == "jit_step" and m["reason"] == "new_shapes" for m in detail["misses"])
    assert {d["ours"] for m in detail["misses"] for d in m["dimensions"]} == {20, 21}
