"""Warm before the first compile, or fill beside the job's start (issue 43): an unmodified torch_xla job
(``tests/auto/torch_xla_job.py``, one graph per shape) under ``XLA_CACHE_AUTO=1``, on a fresh cache
directory each run (a new VM), over a namespace that holds every one of its graphs.

``before``: today's auto-activation, which warms at the job's device query, before its first compile.
``beside``: :mod:`bench.fill_beside`, which at the same moment points torch_xla at the directory and fills
it in a background thread while the job goes on compiling. The two alternate; the figures are each run's
wall time (process start to exit), its steps' time (the device query, where either begins, to the last
step's result), its exit's (uploads and run report flushed: ``before`` only), torch_xla's
``UncachedCompile`` and ``PersistentCacheHit``, and when the fill ended (``beside``). The first run, which
fills the namespace, compiles everything: the cold figure. Medians in BENCHMARKS.md, "Auto-activation".

    python bench/auto_fill.py [--shapes 300] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project root, for tests.support

from tests.support.auto_jobs import AUTO_JOBS, clean_env, hook_interpreter, namespaces_in, server_keys
from tests.support.server import LiveServer, run_server

JOB = AUTO_JOBS / "torch_xla_job.py"
MODES = ("before", "beside")


def _bench_python(where: Path) -> Path:
    """The hook's interpreter, plus the ``.pth`` line that installs the ``beside`` variant when asked."""
    python = hook_interpreter(where)
    site = next(where.glob("lib/python*/site-packages"))
    (site / "zz_bench_fill.pth").write_text("import bench.fill_beside; bench.fill_beside.install()\n")
    return python


def _run(python: Path, server: LiveServer, cache_dir: Path, shapes: int, mode: str) -> dict[str, Any]:
    done_file = cache_dir.with_suffix(".fill")
    env = clean_env(
        XLA_CACHE_AUTO="1",
        XLA_CACHE_SERVER=server.url,
        XLA_CACHE_DIR=str(cache_dir),
        BENCH_AUTO_FILL=mode,
        BENCH_FILL_DONE=str(done_file),
    )
    started = time.perf_counter()
    done = subprocess.run(
        [str(python), str(JOB), "--shapes", str(shapes)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall, ended = time.perf_counter() - started, time.time()
    if done.returncode != 0:
        raise SystemExit(f"the job failed ({done.returncode}):\n{done.stderr[-3000:]}")
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    result: dict[str, Any] = {"mode": mode, "wall": wall, **printed["counters"]}
    result["steps"] = printed["step_seconds"]  # device query to the last step's result
    result["exit"] = ended - printed["steps_ended_at"]  # the last step to the process's end
    if done_file.exists():
        fill_seconds, placed = done_file.read_text().split()
        result.update(fill_seconds=float(fill_seconds), placed=int(placed))
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", type=int, default=300)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        python = _bench_python(scratch / "venv")
        with run_server(scratch / "server") as server:
            cold = _run(python, server, scratch / "seed", args.shapes, "before")
            ((namespace, _),) = namespaces_in(scratch / "seed").items()
            stored = len(server_keys(server.url, namespace))
            print(json.dumps({"cold": cold, "namespace": namespace, "entries": stored}), flush=True)
            runs: list[dict[str, Any]] = []
            for rep in range(args.reps):
                for mode in MODES if rep % 2 == 0 else reversed(MODES):
                    runs.append(_run(python, server, scratch / f"{mode}-{rep}", args.shapes, mode))
                    print(json.dumps(runs[-1]), flush=True)
    for mode in MODES:
        mine = [run for run in runs if run["mode"] == mode]
        walls = sorted(run["wall"] for run in mine)
        steps = statistics.median(run["steps"] for run in mine)
        exits = statistics.median(run["exit"] for run in mine)
        compiles = [run["UncachedCompile"] for run in mine]
        fills = [run["fill_seconds"] for run in mine if "fill_seconds" in run]
        spread = f"min {walls[0]:.2f}, max {walls[-1]:.2f}"
        print(
            f"{mode:<7} wall median {statistics.median(walls):6.2f} s ({spread}); steps {steps:.2f} s; "
            f"exit {exits:.2f} s; "
            f"compiles {compiles}; hits {[run['PersistentCacheHit'] for run in mine]}"
            + (f"; fill done after {statistics.median(fills):.2f} s" if fills else "")
        )
    print(
        f"cold    wall {cold['wall']:.2f} s; steps {cold['steps']:.2f} s; exit {cold['exit']:.2f} s; "
        f"compiles {cold['UncachedCompile']}; {stored} entries stored"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
