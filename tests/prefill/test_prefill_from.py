"""Prefill ``--from`` a namespace, with real processes: an unmodified JAX job compiles a step at 6 batch
sizes into namespace A (``XLA_CACHE_AUTO=1``: it uploads what it compiled, the server parses the graphs);
``xla-cache prefill --from A`` for another target (the same host with 2 CPU devices: another namespace, B)
takes the calls from the server, compiles each and uploads into B; a job in B at those sizes compiles 0.
An unknown module, an unknown namespace and ``--from`` with ``--specs`` are refused saying so."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.prefill.prefill_support import CLI, TIMEOUT, env, server_keys, specs_file
from tests.prefill.steps import calls
from tests.support.auto_jobs import ROOT, last_json, namespaces_in, run_python
from tests.support.needs import require_module
from tests.support.server import LiveServer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEP = "tests.prefill.steps:step"
JOB = str(ROOT / "tests" / "prefill" / "job.py")
SIZES = range(201, 207)  # 6 batch sizes no other test of the module's server compiles
TWO_DEVICES = "--xla_force_host_platform_device_count=2"  # the target: another namespace


def prefill_from(server: LiveServer, *args: str, **extra: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [str(CLI), "prefill", STEP, *args, "--server", server.url, "--json", "--workers", "2"],
        env=env(**extra),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def variants(server: LiveServer, namespace: str, **params: Any) -> httpx.Response:
    return httpx.get(
        f"{server.url}/admin/graphs/variants", params={"namespace": namespace, **params}, timeout=30
    )


def parsed_graph(server: LiveServer, namespace: str, wanted: int) -> dict[str, Any]:
    """The namespace's one graph once the server has parsed ``wanted`` variants of it."""
    deadline = time.monotonic() + 120
    while True:
        graphs = variants(server, namespace).json()["graphs"]
        if graphs and graphs[0]["variants"] >= wanted:
            return dict(graphs[0])
        assert time.monotonic() < deadline, f"the server parsed {graphs} of {wanted} variants"
        time.sleep(0.5)


def test_prefill_from_a_namespace_compiles_what_its_runs_compiled_for_another_target(
    hook_python: Path, live_server: LiveServer, tmp_path: Path
) -> None:
    require_module("jax", "jax is not installed (scripts/test installs jax 0.10)")
    first = ["--first", str(SIZES[0]), "--last", str(SIZES[-1])]
    job_env = env(XLA_CACHE_AUTO="1", XLA_CACHE_SERVER=live_server.url, XLA_CACHE_DIR=str(tmp_path / "a"))
    done = run_python(hook_python, [JOB, *first], job_env)
    assert last_json(done) == {"hits": 0, "misses": len(SIZES)}
    (source,) = namespaces_in(tmp_path / "a")
    graph = parsed_graph(live_server, source, len(SIZES))
    assert graph["module"].startswith("jit_")

    # The route: one graph's variants a page at a time, each parsed.
    page = variants(live_server, source, module=graph["module"], limit=4).json()
    assert len(page["variants"]) == 4 and page["next"]
    rest = variants(live_server, source, module=graph["module"], after=page["next"]).json()
    assert rest["next"] is None
    shapes = {tuple(v["params"][0]["dims"]) for v in page["variants"] + rest["variants"]}
    assert shapes == {(n, 8) for n in SIZES}
    assert {v["params"][0]["element"] for v in rest["variants"]} == {"f32"}

    code, summary, stderr = prefill_from(live_server, "--from", source, "--unverified", XLA_FLAGS=TWO_DEVICES)
    assert code == 0, stderr[-3000:]
    assert summary["namespace"] != source
    assert summary["calls"] == summary["compiled"] == summary["uploaded"] == len(SIZES)
    assert summary["source"].startswith(f"{len(SIZES)} calls from the variants of graph {graph['module']}")
    assert len(server_keys(live_server, summary["namespace"])) == len(SIZES)

    job_env = env(
        XLA_CACHE_AUTO="1",
        XLA_CACHE_SERVER=live_server.url,
        XLA_CACHE_DIR=str(tmp_path / "b"),
        XLA_FLAGS=TWO_DEVICES,
    )
    done = run_python(hook_python, [JOB, *first], job_env)
    assert last_json(done) == {"hits": len(SIZES), "misses": 0}
    assert list(namespaces_in(tmp_path / "b")) == [summary["namespace"]]

    # Bad input: each refused before anything is compiled, saying what is wrong.
    code, _, stderr = prefill_from(live_server, "--from", source, "--module", "jit_nothing", "--unverified")
    assert code == 2 and "holds no parsed graph 'jit_nothing'" in stderr and graph["module"] in stderr
    code, _, stderr = prefill_from(live_server, "--from", "no-such-namespace", "--unverified")
    assert code == 2 and "no-such-namespace" in stderr
    specs = specs_file(tmp_path / "specs.json", calls(SIZES))
    code, _, stderr = prefill_from(live_server, "--from", source, "--specs", str(specs))
    assert code == 2 and "--specs FILE, or --from NAMESPACE" in stderr
    answer = variants(live_server, source, module="jit_nothing")
    assert answer.status_code == 404
