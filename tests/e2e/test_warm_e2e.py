"""End to end: a real server, real torch_xla 2.7 jobs on CPU, the user's dynamic fuse-embedding step.

Job 1 compiles one graph per shape and uploads; its cache directory is wiped; job 2 warms and runs the same
shapes: every graph comes from the persistent cache, none is compiled, and the outputs are identical.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from cache_protocol.signing import Signer
from tests.support.server import LiveServer
from tests.support.torch_xla_jobs import FIRST_JOB_SHAPES, JobResult, job_env, run_cli, run_job, run_spawn_job
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

SHAPES = FIRST_JOB_SHAPES


def wait_for_namespace_stats(
    server: LiveServer, namespace: str, ready: Callable[[dict[str, Any]], bool], limit: float = 30.0
) -> dict[str, Any]:
    """The namespace's row of /admin/stats once ``ready`` holds (the server batches its counters)."""
    last: list[dict[str, Any] | None] = [None]

    def row_once_ready() -> dict[str, Any] | None:
        rows = httpx.get(f"{server.url}/admin/stats", timeout=10).json()["namespaces"]
        last[0] = next((r for r in rows if r["namespace"] == namespace), None)
        return dict(last[0]) if last[0] is not None and ready(last[0]) else None

    return wait_until(
        row_once_ready,
        timeout=limit,
        interval=0.2,
        message=lambda: f"namespace stats never got there: {last[0]}",
    )


def test_first_job_compiles_every_shape_and_uploads_it(first_job: tuple[JobResult, Path]) -> None:
    result, cache = first_job
    assert result.data["graphs"] == SHAPES >= 50
    assert result.counters["UncachedCompile"] == SHAPES
    assert result.counters["PersistentCacheHit"] == 0
    assert result.data["upload"]["uploaded"] == SHAPES
    assert result.warm["errors"] == []
    entries = [p for p in Path(result.warm["cache_dir"]).iterdir() if not p.name.startswith(".")]
    assert len(entries) == SHAPES
    assert Path(result.warm["cache_dir"]).parent == cache
    fingerprint = result.warm["fingerprint"]
    assert fingerprint["torch_xla_version"] == "2.7.0"
    assert fingerprint["torch_version"].startswith("2.7.0")
    assert len(fingerprint["torch_xla_git"]) == 40 and len(fingerprint["torch_git"]) == 40
    assert (fingerprint["device_type"], fingerprint["device_kind"]) == ("CPU", "cpu")
    assert (fingerprint["global_device_count"], fingerprint["process_count"]) == (1, 1)
    assert (fingerprint["spmd"], fingerprint["process_index"]) == (False, 0)
    assert result.cache_warnings() == []


def test_second_job_after_a_wipe_compiles_nothing(
    live_server: LiveServer,
    first_job: tuple[JobResult, Path],
    uploader_key: Signer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, cache = first_job
    shutil.rmtree(cache)
    # It trusts only job 1's key: every entry is verified against it before it is placed.
    trusted = {"XLA_CACHE_TRUSTED_KEYS": uploader_key.public_text()}
    second = run_job(
        ["--server", live_server.url, "--cache-dir", str(cache), "--shapes", str(SHAPES)], trusted
    )
    assert second.warm["namespace"] == first.warm["namespace"]
    assert (second.warm["downloaded_entries"], second.warm["errors"]) == (SHAPES, [])
    assert second.warm["unverified_entries"] == 0
    assert second.counters["PersistentCacheHit"] == first.data["graphs"] == SHAPES
    assert second.counters["UncachedCompile"] == 0
    assert second.counters["PersistentCacheDeserializeFailure"] == 0
    assert second.data["digests"] == first.data["digests"]
    assert second.data["upload"]["uploaded"] == 0  # nothing new to send
    assert second.cache_warnings() == []
    # Job 1 sent each entry's compile time; the server credits it for every hit of job 2.
    row = wait_for_namespace_stats(live_server, second.warm["namespace"], lambda row: row["hits"] >= SHAPES)
    assert row["compile_seconds_saved"] > 0
    with capsys.disabled():
        print(
            f"\n[measured] warm of {SHAPES} entries ({second.warm['downloaded_bytes']} bytes): "
            f"{second.warm['server_seconds']:.3f} s with the server, "
            f"{second.data['warm_seconds']:.3f} s in all"
        )


SPMD_SHAPES = 10  # each shape is one more compile on four devices, twice; ten show every shape round-trips


def test_spmd_over_four_cpu_devices(live_server: LiveServer, tmp_path: Path) -> None:
    env = {"CPU_NUM_DEVICES": "4"}
    cache = str(tmp_path / "cache")
    args = ["--server", live_server.url, "--cache-dir", cache, "--shapes", str(SPMD_SHAPES), "--spmd"]
    first = run_job(args, env)
    fingerprint = first.warm["fingerprint"]
    assert (fingerprint["spmd"], fingerprint["global_device_count"], fingerprint["process_index"]) == (
        True,
        4,
        None,
    )
    assert first.counters["UncachedCompile"] == SPMD_SHAPES == first.data["upload"]["uploaded"]
    shutil.rmtree(tmp_path / "cache")
    second = run_job(args, env)
    assert second.warm["namespace"] == first.warm["namespace"]
    assert second.warm["downloaded_entries"] == SPMD_SHAPES
    assert second.counters["PersistentCacheHit"] == SPMD_SHAPES
    assert second.counters["UncachedCompile"] == 0
    assert second.data["digests"] == first.data["digests"]


def test_other_xla_flags_land_in_another_namespace_and_warm_nothing(
    live_server: LiveServer, first_job: tuple[JobResult, Path], tmp_path: Path
) -> None:
    first, _ = first_job
    other = run_job(
        ["--server", live_server.url, "--cache-dir", str(tmp_path), "--shapes", "10", "--no-flush"],
        {"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"},
    )
    assert other.warm["namespace"] != first.warm["namespace"]
    assert other.warm["fingerprint"]["xla_flags_digest"] != first.warm["fingerprint"]["xla_flags_digest"]
    assert (other.warm["manifest_entries"], other.warm["downloaded_entries"]) == (0, 0)
    # The warm names the namespace it would have used and the flag that set them apart (torch_xla sets
    # --xla_cpu_enable_fast_math=false in XLA_FLAGS on import when the flag is not given).
    text = "--xla_cpu_enable_fast_math=true (theirs: --xla_cpu_enable_fast_math=false)"
    nearest = {near["namespace"]: near for near in other.warm["nearest"]}
    assert [d["text"] for d in nearest[first.warm["namespace"]]["differences"]] == [text]
    assert f"differs in XLA_FLAGS: {text}" in other.stderr
    assert other.counters["PersistentCacheHit"] == 0
    assert other.counters["UncachedCompile"] == 10
    # The job never called flush(): its exit handler uploaded the 10 new entries to the new namespace.
    info = httpx.get(f"{live_server.url}/v1/namespaces/{other.warm['namespace']}", timeout=10).json()
    assert info["entries"] == 10
    assert "uploaded 10 new entries" in other.stderr


def test_xla_hlo_debug_lands_in_another_namespace_and_warm_names_it(
    live_server: LiveServer, first_job: tuple[JobResult, Path], tmp_path: Path
) -> None:
    # torch_xla 2.7 hashes XLA_HLO_DEBUG into every key (runtime/env_hash.cc): in the first job's namespace
    # this job would miss every graph ("different_key") and store a second copy of each.
    first, _ = first_job
    other = run_job(
        ["--server", live_server.url, "--cache-dir", str(tmp_path), "--shapes", "3"], {"XLA_HLO_DEBUG": "1"}
    )
    assert other.warm["namespace"] != first.warm["namespace"]
    assert (
        other.warm["fingerprint"]["XLA_HLO_DEBUG"] == "1" and "XLA_HLO_DEBUG" not in first.warm["fingerprint"]
    )
    assert (other.warm["manifest_entries"], other.warm["downloaded_entries"]) == (0, 0)
    nearest = {near["namespace"]: near for near in other.warm["nearest"]}
    differences = nearest[first.warm["namespace"]]["differences"]
    assert [(d["field"], d["text"]) for d in differences] == [("XLA_HLO_DEBUG", "1 (theirs: unset)")]
    assert "differs in XLA_HLO_DEBUG: 1 (theirs: unset)" in other.stderr
    assert other.counters["UncachedCompile"] == 3
    assert other.data["upload"]["uploaded"] == 3
    # its keys are not the first job's keys for the same shapes: they could never have been shared
    manifest = httpx.get(f"{live_server.url}/v1/namespaces/{first.warm['namespace']}/manifest", timeout=10)
    first_keys = {entry["key"] for entry in manifest.json()["entries"]}
    ours = {p.name for p in Path(other.warm["cache_dir"]).iterdir() if not p.name.startswith(".")}
    assert len(first_keys) >= SHAPES and len(ours) == 3 and not ours & first_keys


def test_cli_warm_prepares_a_directory_torch_xla_hits(
    live_server: LiveServer, first_job: tuple[JobResult, Path], tmp_path: Path
) -> None:
    first, _ = first_job
    done = run_cli(["warm", "--server", live_server.url, "--cache-dir", str(tmp_path), "--json"])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["namespace"] == first.warm["namespace"]
    assert report["downloaded_entries"] == SHAPES and report["errors"] == []
    job = run_job(["--no-warm", "--cache-dir", report["cache_dir"], "--shapes", "10"])
    assert job.counters["PersistentCacheHit"] == 10
    assert job.counters["UncachedCompile"] == 0
    assert job.data["digests"] == first.data["digests"][:10]


def test_entries_torch_xla_cannot_load_give_one_clear_warning(
    live_server: LiveServer, first_job: tuple[JobResult, Path], tmp_path: Path
) -> None:
    """What torch_xla 2.8/2.9 do to every entry, simulated on 2.7 by damaging the warmed files."""
    first, _ = first_job
    job = run_job(
        ["--server", live_server.url, "--cache-dir", str(tmp_path), "--shapes", "10", "--corrupt-local"]
    )
    assert job.counters["PersistentCacheDeserializeFailure"] == 10
    assert job.counters["UncachedCompile"] == 10
    assert job.data["digests"] == first.data["digests"][:10]  # training went on
    warnings = job.cache_warnings()
    assert len(warnings) == 1
    # The background watcher may see the counter before the last of the 10 failures: it warns once.
    assert re.search(r"failed to load \d+ entries", warnings[0])
    assert "PersistentCacheDeserializeFailure" in warnings[0]
    assert "xla-cache doctor" in warnings[0]


def test_doctor_says_this_torch_xla_loads_its_own_entries(live_server: LiveServer) -> None:
    done = run_cli(["doctor", "--server", live_server.url, "--json"])
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["loads_own_entries"] is True
    assert report["torch_xla_version"] == "2.7.0"
    assert report["second_run"]["counters"]["PersistentCacheHit"] == report["second_run"]["graphs"] == 3
    assert report["second_run"]["counters"]["UncachedCompile"] == 0
    assert report["server_ready"] is True
    # the self-test runtime's namespace was looked up on the server (what it holds depends on the other tests)
    assert isinstance(report["namespace_entries"], int)


TOO_LATE = """
import torch, torch_xla, torch_xla.core.xla_model as xm
import xla_cache
x = torch.ones(3, device=torch_xla.device()) * 2
xm.mark_step()
try:
    xla_cache.warm("http://127.0.0.1:9", sys.argv[1])
except xla_cache.CacheAlreadyInitialized as exc:
    print("refused:", exc)
"""


def test_warm_after_the_first_graph_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + TOO_LATE, str(tmp_path)],
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "refused: torch_xla already compiled a graph" in done.stdout
    assert "before the first step" in done.stdout


def test_rank_threads_without_spmd_share_their_process_cache(live_server: LiveServer, tmp_path: Path) -> None:
    """xmp.spawn on CPU runs one thread per device in one process; torch_xla keeps one cache per process, and
    its executables are replicated over the process's devices: one namespace, one warm, hits on every rank."""
    env = {"CPU_NUM_DEVICES": "2"}
    args = ["--server", live_server.url, "--cache-dir", str(tmp_path / "cache"), "--shapes", "8"]
    first = run_spawn_job(args, env)
    assert sorted(first) == [0, 1]
    assert {r["device"] for r in first.values()} == {"xla:0", "xla:1"}
    assert first[0]["namespace"] == first[1]["namespace"]
    assert first[0]["uploaded"] == 8
    shutil.rmtree(tmp_path / "cache")
    second = run_spawn_job(args, env)
    for rank in (0, 1):
        assert second[rank]["namespace"] == first[rank]["namespace"]
        assert second[rank]["downloaded"] == 8 and second[rank]["errors"] == []
        # The counters are the process's, shared by both rank threads: every one of the 8 graphs is loaded
        # from the persistent cache at least once, and when both threads reach a graph at the same moment
        # both may load it. What must hold exactly: nothing is compiled.
        assert 8 <= second[rank]["counters"]["PersistentCacheHit"] <= 16
        assert second[rank]["counters"]["UncachedCompile"] == 0
        assert second[rank]["digests"] == first[rank]["digests"]
