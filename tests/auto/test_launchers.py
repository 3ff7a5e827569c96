"""Unmodified torch_xla jobs that launchers start, under ``XLA_CACHE_AUTO=1`` alone, against a real server:
``torchrun --nproc-per-node 2`` (two processes of one host share one warm, upload each new entry once and
report one run each, with its rank), ``xmp.spawn`` (on the CPU one process whose rank threads share its
warm and its report), and two hosts (two cache directories: torch_xla ranks of a two-node launcher, and
the two processes of a ``jax.distributed`` job), each of which warms and fills its own."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.auto_jobs import (
    AUTO_JOBS,
    TIMEOUT,
    clean_env,
    namespaces_in,
    run_python,
    runs_of,
    served,
    server_keys,
)
from tests.support.needs import require_module
from tests.support.server import LiveServer, free_port, run_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOB = str(AUTO_JOBS / "torch_xla_ranks.py")
SHAPES = 3


@pytest.fixture(autouse=True)
def _torch_xla() -> None:
    require_module("torch_xla", "torch_xla is not installed (scripts/test installs torch_xla 2.7)")


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[LiveServer]:
    """A server of the test's own: the tests count what the server served and holds, and their jobs'
    namespaces are the same."""
    with run_server(tmp_path / "server") as server:
        yield server


def _env(server: LiveServer, cache_dir: Path, **extra: str) -> dict[str, str]:
    return clean_env(XLA_CACHE_AUTO="1", XLA_CACHE_SERVER=server.url, XLA_CACHE_DIR=str(cache_dir), **extra)


def _ranks(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """What each rank printed (one JSON line each), by rank; no warning of the client."""
    assert "xla-cache:" not in done.stderr, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return sorted(lines, key=lambda line: int(line["rank"]))


def _torchrun(python: Path, shapes: int, env: dict[str, str]) -> list[dict[str, Any]]:
    args = [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        JOB,
        "--shapes",
        str(shapes),
    ]
    return _ranks(run_python(python, args, env))


def _namespace(cache_dir: Path) -> str:
    (name, _), *others = namespaces_in(cache_dir).items()
    assert others == []
    return name


def _keys(directory: Path) -> set[str]:
    return {path.name for path in directory.iterdir() if not path.name.startswith(".")}


def test_torchrun_ranks_share_one_warm_and_report_a_run_each(
    hook_python: Path, live_server: LiveServer, tmp_path: Path
) -> None:
    first = _torchrun(hook_python, SHAPES, _env(live_server, tmp_path / "A"))
    assert [rank["rank"] for rank in first] == [0, 1] and all(rank["client_loaded"] for rank in first)
    assert len({rank["pid"] for rank in first}) == 2  # two processes
    namespace = _namespace(tmp_path / "A")
    stored = server_keys(live_server.url, namespace)
    assert len(stored) == SHAPES
    runs = runs_of(live_server.url, namespace)
    assert sorted(run["process_index"] for run in runs) == [0, 1]  # one report per rank, with its rank
    assert sum(run["uploaded_entries"] for run in runs) == SHAPES  # each entry went up once

    # Two more ranks on a new host directory, two shapes the server does not hold yet.
    before = served(live_server.url, namespace)
    second = _torchrun(hook_python, SHAPES + 2, _env(live_server, tmp_path / "B"))
    assert served(live_server.url, namespace) - before == SHAPES  # one warm: each entry fetched once
    # Both ranks loaded what the warm placed (and perhaps what the other rank wrote meanwhile).
    assert all(rank["counters"]["PersistentCacheHit"] >= SHAPES for rank in second)
    new = server_keys(live_server.url, namespace) - stored
    assert len(new) == 2 and new <= _keys(tmp_path / "B" / namespace)
    earlier = {run["run_id"] for run in runs}
    later = [run for run in runs_of(live_server.url, namespace) if run["run_id"] not in earlier]
    assert sorted(run["process_index"] for run in later) == [0, 1]
    assert sum(run["uploaded_entries"] for run in later) == len(new)  # each new entry uploaded once


def test_xmp_spawn_rank_threads_share_their_process_warm_and_report(
    hook_python: Path, live_server: LiveServer, tmp_path: Path
) -> None:
    """On the CPU ``xmp.spawn`` takes ``nprocs`` None or 1 and starts one process whose ranks are threads,
    one per device (``CPU_NUM_DEVICES``): one warm, one run report, as for any process."""
    results = []
    for vm in ("A", "B"):
        env = _env(live_server, tmp_path / vm, CPU_NUM_DEVICES="2")
        results.append(_ranks(run_python(hook_python, [JOB, "--shapes", str(SHAPES), "--xmp"], env)))
    first, second = results
    assert [rank["rank"] for rank in first] == [0, 1] and len({rank["pid"] for rank in first}) == 1
    assert all(rank["client_loaded"] for rank in first)
    assert all(rank["counters"]["UncachedCompile"] == 0 for rank in second)  # warmed: nothing compiled
    namespace = _namespace(tmp_path / "B")
    assert _namespace(tmp_path / "A") == namespace
    runs = runs_of(live_server.url, namespace)
    assert [run["process_index"] for run in runs] == [0, 0]  # one per run of the job, xmp's local rank 0
    assert min(run["misses"] for run in runs) == 0


def test_two_hosts_each_warm_and_fill_their_own_directory(
    hook_python: Path, live_server: LiveServer, tmp_path: Path
) -> None:
    """Two hosts of one job (two cache directories, ``RANK`` 0 and 1 as a two-node launcher sets it), run at
    once over a namespace that holds the first shapes: each host warms its own directory from the server and
    keeps its own compiles there; each host's report names its rank."""
    seed = tmp_path / "seed"
    _ranks(run_python(hook_python, [JOB, "--shapes", str(SHAPES)], _env(live_server, seed)))
    namespace = _namespace(seed)
    stored, before = server_keys(live_server.url, namespace), served(live_server.url, namespace)
    earlier = {run["run_id"] for run in runs_of(live_server.url, namespace)}
    hosts = [tmp_path / "host0", tmp_path / "host1"]
    started = [
        subprocess.Popen(
            [str(hook_python), JOB, "--shapes", str(SHAPES + 1)],
            env=_env(live_server, host, RANK=str(rank)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, host in enumerate(hosts)
    ]
    hits = []
    for process in started:
        out, err = process.communicate(timeout=TIMEOUT)
        assert process.returncode == 0, err[-3000:]
        (rank,) = _ranks(subprocess.CompletedProcess(process.args, 0, out, err))
        counters = rank["counters"]
        # Warmed before its first compile (and, if the other host uploaded the new shape before this one
        # warmed, that one too: the hosts start at once, but not in step).
        assert counters["PersistentCacheHit"] >= SHAPES
        assert counters["PersistentCacheHit"] + counters["UncachedCompile"] == SHAPES + 1
        hits.append(counters["PersistentCacheHit"])
    # One warm per host: in a fresh directory each hit is an entry the warm fetched, each fetched once.
    assert served(live_server.url, namespace) - before == sum(hits)
    new = server_keys(live_server.url, namespace) - stored
    assert len(new) == 1
    for host in hosts:
        assert _namespace(host) == namespace and _keys(host / namespace) >= stored | new  # its own disk
    runs = [run for run in runs_of(live_server.url, namespace) if run["run_id"] not in earlier]
    assert sorted(run["process_index"] for run in runs) == [0, 1]
    assert 1 <= sum(run["uploaded_entries"] for run in runs) <= 2  # at most once per host


def test_the_hosts_of_a_distributed_jax_job_each_warm_their_own_directory(
    hook_python: Path, live_server: LiveServer, tmp_path: Path
) -> None:
    """A two-host JAX job (``jax.distributed``, two processes, each with its own cache directory as each
    host has its own disk) computing on one array over both: run twice, the second time on fresh
    directories, each host warms its own directory (each entry fetched once per host); only process 0,
    which JAX writes its cache from, uploads; each run report carries JAX's process index. Process 0
    compiles nothing the second time. Process 1 compiles again: on the CPU, JAX 0.10's key of one program
    differs between its processes (the "compile_options" and "accelerator_config" components hash
    differently in each, as JAX's DEBUG key log shows), so it finds none of the entries process 0 wrote."""
    require_module("jax", "jax is not installed (scripts/test installs jax 0.10)")
    job = str(AUTO_JOBS / "jax_job.py")

    def job_on_two_hosts(hosts: list[Path]) -> list[dict[str, Any]]:
        coordinator = f"127.0.0.1:{free_port()}"
        command = [str(hook_python), job, "--sizes", str(SHAPES)]
        started = [
            subprocess.Popen(
                [*command, "--coordinator", coordinator, "--process-id", str(index), "--process-count", "2"],
                env=_env(live_server, host),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for index, host in enumerate(hosts)
        ]
        results = []
        for process in started:
            out, err = process.communicate(timeout=TIMEOUT)
            assert process.returncode == 0, err[-3000:]
            assert "xla-cache:" not in err, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results

    first = job_on_two_hosts([tmp_path / "A0", tmp_path / "A1"])
    assert [result["process_index"] for result in first] == [0, 1]
    assert all(result["misses"] >= SHAPES for result in first)
    namespace = _namespace(tmp_path / "A0")
    assert _namespace(tmp_path / "A1") == namespace
    stored = server_keys(live_server.url, namespace)
    assert len(stored) >= SHAPES and stored == _keys(tmp_path / "A0" / namespace) & stored
    runs = runs_of(live_server.url, namespace)
    assert sorted((run["process_index"], run["uploaded_entries"]) for run in runs) == [
        (0, len(stored)),
        (1, 0),
    ]

    before = served(live_server.url, namespace)
    second = job_on_two_hosts([tmp_path / "B0", tmp_path / "B1"])
    assert (second[0]["hits"], second[0]["misses"]) == (first[0]["misses"], 0)
    assert second[1]["misses"] == first[1]["misses"]  # the CPU's per-process keys (above)
    assert served(live_server.url, namespace) - before == 2 * len(stored)  # one warm per host
    for host in ("B0", "B1"):
        assert _keys(tmp_path / host / namespace) >= stored  # each host filled its own disk
