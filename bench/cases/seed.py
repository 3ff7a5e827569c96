"""The seed workload end to end: 2,000 distinct shapes of a fuse-embedding step on torch_xla 2.7 (CPU), cold,
as the first job with the cache (compiling and uploading), warmed from the server, and from torch_xla's own
local cache directory (the floor a warmed job can hope for)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.core import CaseResult, Context, Series, case
from bench.launch import run_server

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "e2e" / "fuse_job.py"  # the end-to-end tests' torch_xla job, run as a program
FULL_SHAPES = 2000
SEQ_LEN = 128  # 2,112 distinct (images, text) shapes fit; the end-to-end tests' 64 holds 240


def _job(
    args: list[str], timeout: float, extra: dict[str, str] | None = None
) -> tuple[float, dict[str, Any]]:
    """Run the job once (``extra``: more environment); its wall time (the process, imports included) and
    its JSON report."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_")}
    env.update({"PJRT_DEVICE": "CPU", "PYTHONPATH": str(ROOT), **(extra or {})})
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
        "importing torch and torch_xla); the cold and first-job runs once (minutes each); then "
        f"{ctx.reps} turns of: the floor, the warmed job, the warmed job with run reports off, with uploads "
        "off, and following"
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
        local = next(p for p in first_dir.iterdir() if p.is_dir())  # <cache-dir>/<namespace>
        loops = _in_turns(ctx, result, server_args, shape_args, local, count, timeout, reports)
    warmed = reports[WARMED]
    cold = reports["cold (no cache)"]
    first = reports["first job with the cache"]
    result.figures["warmed: warm s"] = warmed["warm_seconds"]
    result.figures["warmed: compiles"] = warmed["counters"]["UncachedCompile"]
    result.figures["warmed: cache hits"] = warmed["counters"]["PersistentCacheHit"]
    ratio = loops[WARMED].median / loops[FLOOR].median
    result.figures["warmed loop / floor loop"] = ratio
    result.figures["first job loop / cold loop"] = first["loop_seconds"] / cold["loop_seconds"]
    _parts(result, loops)
    result.target(
        "a warmed job compiles nothing",
        warmed["counters"]["UncachedCompile"],
        0,
        at_most=True,
        fmt="{:.0f} compiles",
        why=f"{warmed['counters']['PersistentCacheHit']} cache hits of {count} shapes",
    )
    result.target(
        f"a warmed job's loop within {LOOP_LIMIT:.2f}x of torch_xla's own local directory",
        ratio,
        LOOP_LIMIT,
        at_most=True,
        fmt="{:.3f}x",
        why=(
            f"medians of {ctx.reps} in turns: {loops[WARMED].median:.2f} s against "
            f"{loops[FLOOR].median:.2f} s; the loop's CPU {_cpu_ratio(loops, WARMED):.3f}x"
        ),
    )


FLOOR = "torch_xla's own local directory (floor)"
WARMED = "warmed from the server"
LOOP_LIMIT = 1.05  # a warmed job's loop against the floor's (issue 45)
PART_LIMIT = 0.02  # what one part of the client beside the job may cost its loop
PARTS = {  # a warmed job with one part of the client off: its label, the job's arguments and environment
    "warmed, run reports off": ([], {"XLA_CACHE_RUN_REPORTS": "0"}),
    "warmed, uploads off": (["--no-upload"], {}),
}
FOLLOWING = "warmed and following"  # one part more: the follower (the others on)


@dataclass
class Loops:
    """One series of jobs: each one's loop in seconds, the CPU seconds of every thread of the process
    during the loop, and those of the job's own thread (CPU resists the load of a shared machine)."""

    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    thread_cpu: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)  # the client's own threads (xla-cache-*)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)


def _in_turns(
    ctx: Context,
    result: CaseResult,
    server_args: list[str],
    shape_args: list[str],
    local: Path,
    count: int,
    timeout: float,
    reports: dict[str, dict[str, Any]],
) -> dict[str, Loops]:
    """The floor, the warmed job and the warmed job with each part of the client off (and following),
    one of each in turn, ``ctx.reps`` turns: a machine's load moves within minutes, so series timed one
    after the other would compare different machines. Each warmed job warms into an empty directory."""
    series = {label: Series(label, work={"shapes": count}) for label in (FLOOR, WARMED, *PARTS, FOLLOWING)}
    loops = {label: Loops() for label in series}
    runs: dict[str, list[str]] = {FLOOR: [*shape_args, "--no-warm", "--cache-dir", str(local)]}
    for label, (args, _) in {WARMED: ([], {}), **PARTS, FOLLOWING: (["--follow"], {})}.items():
        runs[label] = [*server_args, *args]
    for turn in range(ctx.reps):
        for label, args in runs.items():
            env = PARTS[label][1] if label in PARTS else {}
            if label != FLOOR:
                args = [*args, "--cache-dir", str(ctx.tmpdir(f"seed-warmed-{turn}"))]
            os.sync()
            seconds, report = _job(args, timeout, env)
            report["wall_seconds"] = seconds
            reports[label] = report
            series[label].seconds.append(seconds)
            loops[label].seconds.append(report["loop_seconds"])
            loops[label].cpu.append(report["loop_cpu_seconds"])
            loops[label].thread_cpu.append(report["loop_thread_seconds"])
            by_thread = report.get("loop_cpu_by_thread", {})
            loops[label].client_cpu.append(sum(v for k, v in by_thread.items() if k.startswith("xla-cache")))
    for label, one in series.items():
        result.add(one)
        result.figures[f"{label}: loop s (median)"] = loops[label].median
        result.figures[f"{label}: loop CPU s (median)"] = loops[label].cpu_median
        result.figures[f"{label}: job thread CPU s (median)"] = statistics.median(loops[label].thread_cpu)
        result.figures[f"{label}: client threads CPU s (median)"] = statistics.median(loops[label].client_cpu)
    result.figures["load average"] = os.getloadavg()[0]
    return loops


def _cpu_ratio(loops: dict[str, Loops], label: str) -> float:
    return loops[label].cpu_median / loops[FLOOR].cpu_median


def _parts(result: CaseResult, loops: dict[str, Loops]) -> None:
    """What each part of the client costs the loop: the warmed job's loop CPU less that of the same job
    with the part off (following: more than the job without it), over the floor's loop seconds; and the
    same in wall seconds, which the machine's load moves more; and the client's own threads' CPU with and
    without it (the part's own work, which the load moves least: the job thread's CPU alone varies by more
    than 2% from one run to the next on a loaded machine)."""
    floor = loops[FLOOR].median
    costs = {
        "run reports": ("warmed, run reports off", False),
        "uploader": ("warmed, uploads off", False),
        "following": (FOLLOWING, True),
    }
    for part, (label, added) in costs.items():
        with_part, without = (label, WARMED) if added else (WARMED, label)
        cpu = (loops[with_part].cpu_median - loops[without].cpu_median) / floor
        wall = (loops[with_part].median - loops[without].median) / floor
        result.figures[f"cost of {part}: loop CPU / floor loop"] = cpu
        result.figures[f"cost of {part}: loop wall / floor loop"] = wall
        own = statistics.median(loops[with_part].client_cpu) - statistics.median(loops[without].client_cpu)
        result.figures[f"cost of {part}: client threads CPU / floor loop"] = own / floor
        result.target(
            f"{part} beside the job costs its loop < {PART_LIMIT:.0%}",
            cpu,
            PART_LIMIT,
            at_most=True,
            fmt="{:+.1%}",
            why=(
                f"loop CPU with and without it, medians; in wall seconds {wall:+.1%}; the client's threads "
                f"{own / floor:+.1%}"
            ),
        )
