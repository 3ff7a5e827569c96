"""Unmodified JAX and torchax jobs under ``XLA_CACHE_AUTO=1`` alone, against a real server: run twice (the
second time in a fresh cache directory, as a new VM would), the second compiles nothing and both runs are
reported; ranks that ``multiprocessing`` spawns on one host share one warm, upload each new entry once and
report one run each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.auto_jobs import (
    AUTO_JOBS,
    clean_env,
    last_json,
    namespaces_in,
    run_python,
    runs_of,
    served,
    server_keys,
)
from tests.support.needs import require_module
from tests.support.server import LiveServer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = 3


def _env(server: LiveServer, cache_dir: Path) -> dict[str, str]:
    return clean_env(XLA_CACHE_AUTO="1", XLA_CACHE_SERVER=server.url, XLA_CACHE_DIR=str(cache_dir))


def test_an_unmodified_jax_job_and_its_spawned_ranks(
    hook_python: Path, live_server: LiveServer, tmp_path: Path
) -> None:
    require_module("jax", "jax is not installed (scripts/test installs jax 0.10)")
    job = str(AUTO_JOBS / "jax_job.py")
    first = last_json(
        run_python(hook_python, [job, "--sizes", str(SIZES)], _env(live_server, tmp_path / "A"))
    )
    done = run_python(hook_python, [job, "--sizes", str(SIZES)], _env(live_server, tmp_path / "B"))
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    second = last_json(done)
    assert first["client"] and first["misses"] >= SIZES
    assert second == {"hits": first["misses"], "misses": 0, "client": True}
    ((namespace, _),) = namespaces_in(tmp_path / "B").items()
    assert sorted((run["misses"], run["hits"]) for run in runs_of(live_server.url, namespace)) == [
        (0, first["misses"]),
        (first["misses"], 0),
    ]

    # Two ranks spawned on one host, two sizes the server does not hold yet.
    before, served_before = server_keys(live_server.url, namespace), served(live_server.url, namespace)
    earlier = {run["run_id"] for run in runs_of(live_server.url, namespace)}
    env = _env(live_server, tmp_path / "C")
    ranks = json.loads(
        run_python(
            hook_python, [job, "--sizes", str(SIZES + 2), "--processes", "2"], env
        ).stdout.splitlines()[-1]
    )
    # Both warmed before compiling (a rank may also load what the other wrote into their directory).
    assert len(ranks) == 2 and all(rank["hits"] >= first["misses"] for rank in ranks)
    # One warm: each entry fetched once.
    assert served(live_server.url, namespace) - served_before == len(before)
    after = server_keys(live_server.url, namespace)
    new = after - before
    assert new and new == {p.name for p in (tmp_path / "C" / namespace).iterdir() if p.name in after} - before
    ranks_runs = [run for run in runs_of(live_server.url, namespace) if run["run_id"] not in earlier]
    # One report per rank, each naming its process: JAX says 0 for both (no distributed runtime), so the
    # index is the number multiprocessing gave each child.
    assert sorted(run["process_index"] for run in ranks_runs) == [1, 2]
    assert sum(run["uploaded_entries"] for run in ranks_runs) == len(new)  # each new entry uploaded once


def test_an_unmodified_torchax_job(hook_python: Path, live_server: LiveServer, tmp_path: Path) -> None:
    require_module("torchax", "torchax is not installed (scripts/test installs torchax 0.0.7)")
    job = [str(AUTO_JOBS / "torchax_job.py"), "--sizes", "2"]
    first = last_json(run_python(hook_python, job, _env(live_server, tmp_path / "A")))
    second = last_json(run_python(hook_python, job, _env(live_server, tmp_path / "B")))
    # (a graph compiled twice in one run is a hit the second time)
    assert first["misses"] >= 2 and second == {"hits": first["hits"] + first["misses"], "misses": 0}
