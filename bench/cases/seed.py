"""The seed workload end to end: 2,000 distinct shapes of a fuse-embedding step on torch_xla 2.7 (CPU), cold,
as the first job with the cache (compiling and uploading), warmed from the server, and from torch_xla's own
local cache directory (the floor a warmed job can hope for)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.core import CaseResult, Context, case
from bench.launch import run_server

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "e2e" / "fuse_job.py"  # the end-to-end tests' torch_xla job, run as a program
FULL_SHAPES = 2000
SEQ_LEN = 128  # 2,112 distinct (images, text) shapes fit; the end-to-end tests' 64 holds 240


def _job(args: list[str], timeout: float) -> tuple[float, dict[str, Any]]:
    """Run the job once; its wall time (the process, imports included) and its JSON report."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_")}
    env.update({"PJRT_DEVICE": "CPU", "PYTHONPATH": str(ROOT)})
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(JOB), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the job exited {done.returncode}: {done.stderr.strip()[-800:]}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seconds, report


@case(
    "seed-e2e",
    "the seed workload: 2,000 shapes of a fuse-embedding step on torch_xla 2.7 CPU, cold, first job with "
    "the cache, warmed from the server, and from torch_xla's own local directory",
    full_only=True,
)
def seed_e2e(ctx: Context, result: CaseResult) -> None:
    try:
        import torch_xla  # noqa: F401
    except ImportError:
        result.notes.append("torch_xla is not installed: not run")
        return
    count = int(ctx.options.get("seed_shapes") or FULL_SHAPES)
    timeout = 1800.0
    shape_args = ["--shapes", str(count), "--seq-len", str(SEQ_LEN)]
    result.notes.append(
        f"{count} distinct shapes (padded length {SEQ_LEN}), one process each run (the wall time includes "
        "importing torch and torch_xla); the cold and first-job runs once (minutes each), the others "
        f"{ctx.reps} times"
    )
    reports: dict[str, dict[str, Any]] = {}

    def run(label: str, args: list[str], reps: int | None = None) -> None:
        def once() -> None:
            seconds, report = _job(args, timeout)
            report["wall_seconds"] = seconds
            reports[label] = report

        result.add(ctx.repeat(label, once, reps=reps, work={"shapes": count}))
        report = reports[label]
        counters = report["counters"]
        result.figures[f"{label}: loop s"] = report["loop_seconds"]
        result.figures[f"{label}: compiles"] = counters["UncachedCompile"]
        result.figures[f"{label}: cache hits"] = counters["PersistentCacheHit"]
        if report.get("warm"):
            result.figures[f"{label}: warm s"] = report["warm_seconds"]

    run("cold (no cache)", [*shape_args, "--no-cache", "--cache-dir", str(ctx.tmpdir("seed-none"))], reps=1)
    with run_server(ctx.tmpdir("seed-server")) as server:
        first_dir = ctx.tmpdir("seed-first")
        server_args = ["--server", server.url, "--timeout", "120", *shape_args]
        run("first job with the cache", [*server_args, "--cache-dir", str(first_dir)], reps=1)
        uploaded = reports["first job with the cache"]["upload"]
        result.figures["first job: entries uploaded"] = uploaded.get("uploaded", 0)
        warmed_dir = ctx.tmpdir("seed-warmed")

        def empty() -> None:
            for item in warmed_dir.iterdir():
                if item.is_dir():
                    for child in item.iterdir():
                        child.unlink()
                    item.rmdir()
                else:
                    item.unlink()

        result.add(
            ctx.repeat(
                "warmed from the server",
                lambda: reports.__setitem__("warmed", _warmed(server_args, warmed_dir, timeout)),
                setup=empty,
                work={"shapes": count},
            )
        )
        warmed = reports["warmed"]
        result.figures["warmed: loop s"] = warmed["loop_seconds"]
        result.figures["warmed: warm s"] = warmed["warm_seconds"]
        result.figures["warmed: compiles"] = warmed["counters"]["UncachedCompile"]
        result.figures["warmed: cache hits"] = warmed["counters"]["PersistentCacheHit"]
    local = next(p for p in first_dir.iterdir() if p.is_dir())  # <cache-dir>/<namespace>
    run("torch_xla's own local directory (floor)", [*shape_args, "--no-warm", "--cache-dir", str(local)])
    floor = reports["torch_xla's own local directory (floor)"]
    cold = reports["cold (no cache)"]
    first = reports["first job with the cache"]
    result.figures["warmed loop / floor loop"] = warmed["loop_seconds"] / floor["loop_seconds"]
    result.figures["first job loop / cold loop"] = first["loop_seconds"] / cold["loop_seconds"]
    result.target(
        "a warmed job compiles nothing",
        warmed["counters"]["UncachedCompile"],
        0,
        at_most=True,
        fmt="{:.0f} compiles",
        why=f"{warmed['counters']['PersistentCacheHit']} cache hits of {count} shapes",
    )
    result.target(
        "a warmed job's loop within 1.5x of torch_xla's own local directory",
        warmed["loop_seconds"] / floor["loop_seconds"],
        1.5,
        at_most=True,
        fmt="{:.2f}x",
        why=f"{warmed['loop_seconds']:.2f} s against {floor['loop_seconds']:.2f} s, plus the warm itself",
    )


def _warmed(server_args: list[str], directory: Path, timeout: float) -> dict[str, Any]:
    seconds, report = _job([*server_args, "--cache-dir", str(directory)], timeout)
    report["wall_seconds"] = seconds
    return report
