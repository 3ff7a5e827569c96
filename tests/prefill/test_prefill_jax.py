"""Prefill on this host's CPU, with real processes: ``xla-cache prefill`` compiles a step for 50 shapes in
worker processes and uploads them; an unmodified JAX job (``XLA_CACHE_AUTO=1``, another process, a fresh
cache directory) running those shapes compiles nothing; a second prefill uploads nothing; a prefill killed
midway leaves only whole entries, and run again it compiles only the rest."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.prefill.prefill_support import (
    CLI,
    entry_bytes,
    env,
    prefill_command,
    run_prefill,
    server_keys,
    specs_file,
)
from tests.prefill.steps import calls
from tests.support.auto_jobs import ROOT, last_json, namespaces_in, run_python
from tests.support.needs import require_module
from tests.support.server import LiveServer
from xla_cache.frameworks.jax import check_entry

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEP = "tests.prefill.steps:step"
JOB = str(ROOT / "tests" / "prefill" / "job.py")


def run_cli(*args: str, server: LiveServer | None = None, json_out: bool = True) -> dict[str, Any]:
    """Run ``xla-cache ARGS --server URL``: its JSON (``json_out``), else ``{"text": stdout}``."""
    assert server is not None
    done = subprocess.run(
        [str(CLI), *args, "--server", server.url],
        env=env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout)) if json_out else {"text": done.stdout}


def test_fifty_prefilled_shapes_cost_an_unmodified_job_no_compile(
    hook_python: Path, live_server: LiveServer, tmp_path: Path
) -> None:
    require_module("jax", "jax is not installed (scripts/test installs jax 0.10)")
    specs = specs_file(tmp_path / "specs.json", calls(range(1, 51)), STEP)
    code, summary, stderr = run_prefill(live_server, specs, "--unverified", "--workers", "2")
    assert code == 0, stderr[-3000:]
    assert (summary["compiled"], summary["stored"], summary["failed"]) == (50, 0, [])
    assert summary["uploaded"] == 50 and summary["unverified"]
    namespace = summary["namespace"]
    assert len(server_keys(live_server, namespace)) == 50

    # Marked prefilled, unverified: in the manifest, in what warm and graphs say.
    manifest = httpx.get(f"{live_server.url}/v1/namespaces/{namespace}/manifest", timeout=30).json()
    marks = {entry.get("prefilled", "").rsplit(" ", 1)[-1] for entry in manifest["entries"]}
    assert marks == {"unverified"}
    assert all(entry["prefilled"].startswith("prefill host=") for entry in manifest["entries"])
    cli = functools.partial(run_cli, server=live_server)
    warmed = cli("warm", "--namespace", namespace, "--cache-dir", str(tmp_path / "warm"), "--json")
    assert (warmed["prefilled_entries"], warmed["prefilled_unverified"]) == (50, 50)
    said = cli("warm", "--namespace", namespace, "--cache-dir", str(tmp_path / "warm"), json_out=False)
    assert "prefilled   50 of the namespace's 50 entries" in said["text"]
    graphs = cli("graphs", namespace, json_out=False)["text"]
    assert "50 entries prefilled (compiled ahead of the target job) (50 unverified" in graphs

    job_env = env(XLA_CACHE_AUTO="1", XLA_CACHE_SERVER=live_server.url, XLA_CACHE_DIR=str(tmp_path / "job"))
    done = run_python(hook_python, [JOB, "--first", "1", "--last", "50"], job_env)
    assert last_json(done) == {"hits": 50, "misses": 0}
    assert list(namespaces_in(tmp_path / "job")) == [namespace]  # the namespace the prefill computed

    # Again: everything is stored already, nothing compiled nor uploaded.
    code, again, stderr = run_prefill(live_server, specs, "--unverified", "--workers", "2")
    assert code == 0, stderr[-3000:]
    assert (again["compiled"], again["stored"], again["uploaded"], again["failed"]) == (0, 50, 0, [])


def test_a_prefill_killed_midway_leaves_whole_entries_and_resumes(
    live_server: LiveServer, tmp_path: Path
) -> None:
    require_module("jax", "jax is not installed (scripts/test installs jax 0.10)")
    wanted = 150
    specs = specs_file(tmp_path / "specs.json", calls(range(101, 101 + wanted)), STEP)
    # The namespace: prefill one call of the same step first (it is not among the 150).
    one = specs_file(tmp_path / "one.json", calls(range(100, 101)), STEP)
    code, first, stderr = run_prefill(live_server, one, "--unverified", "--workers", "1")
    assert code == 0, stderr[-3000:]
    namespace, before = first["namespace"], server_keys(live_server, first["namespace"])

    process = subprocess.Popen(
        prefill_command(live_server, specs, "--unverified", "--workers", "1"),
        env=env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its workers too: killed as a preempted VM's would be
    )
    try:
        deadline = time.monotonic() + 300
        while len(server_keys(live_server, namespace) - before) == 0:
            assert process.poll() is None, "the prefill ended before it uploaded anything"
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    uploaded = server_keys(live_server, namespace) - before
    assert 0 < len(uploaded) < wanted
    for key in uploaded:  # only whole entries
        check_entry([entry_bytes(live_server, namespace, key)])

    code, resumed, stderr = run_prefill(live_server, specs, "--unverified", "--workers", "1")
    assert code == 0, stderr[-3000:]
    assert resumed["stored"] == len(uploaded)
    assert resumed["compiled"] == resumed["uploaded"] == wanted - len(uploaded)
    assert len(server_keys(live_server, namespace) - before) == wanted


def test_a_real_run_that_differs_in_a_key_component_makes_prefill_refuse(
    live_server: LiveServer, tmp_path: Path
) -> None:
    require_module("jax", "jax is not installed (scripts/test installs jax 0.10)")
    one = specs_file(tmp_path / "one.json", calls(range(1000, 1001)), STEP)
    code, first, stderr = run_prefill(live_server, one, "--unverified", "--workers", "1")
    assert code == 0, stderr[-3000:]
    namespace, components = first["namespace"], first["components"]
    assert components["xla_caches"] == "none" and components["devices"] == [[0, []]]

    # The namespace's latest real run saw another platform version (its report says so).
    report = {
        "run_id": "differing-run-0001",
        "namespace": namespace,
        "framework": "jax",
        "host": "another-host",
        "started_at": time.time(),
        "runtime": {**components, "platform_version": "another runtime"},
    }
    httpx.post(f"{live_server.url}/v1/runs", json=report, timeout=30).raise_for_status()
    before = server_keys(live_server, namespace)

    specs = specs_file(tmp_path / "specs.json", calls(range(1001, 1004)), STEP)
    code, refused, stderr = run_prefill(live_server, specs, "--workers", "1")
    assert code == 2 and refused == {}
    assert "differing-run-0001" in stderr and "platform_version: prefill" in stderr
    assert "the real run 'another runtime'" in stderr
    assert server_keys(live_server, namespace) == before  # nothing published

    code, anyway, stderr = run_prefill(live_server, specs, "--workers", "1", "--unverified")
    assert code == 0, stderr[-3000:]
    assert anyway["unverified"] and "platform_version" in anyway["verified"] and anyway["uploaded"] == 3
    manifest = httpx.get(f"{live_server.url}/v1/namespaces/{namespace}/manifest", timeout=30).json()
    new = [entry for entry in manifest["entries"] if entry["key"] not in before]
    assert len(new) == 3 and all(entry["prefilled"].endswith(" unverified") for entry in new)
