"""``python -m bench``: run the cases side by side, print medians, rates, ratios and targets.

    python -m bench                      # every case at full size (index-scale takes several minutes)
    python -m bench --quick              # small sizes, 3 repetitions: well under a minute
    python -m bench --only push,warm     # these cases (and the floors their ratios need)
    python -m bench --skip index-scale --reps 5 --json figures.json

Setup (servers, data, uploads a case needs first) is never timed. Exit status 1 when a case failed to run;
a target not met is a figure, not a failure.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench.cases import ORDER
from bench.core import CASES, MET, NOT_MET, CaseResult, Context, rate_text, seconds_text

MIN_REPS = 3


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_average": os.getloadavg(),
    }
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        info["cpu_model"] = next(
            (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
            "",
        )
        meminfo = Path("/proc/meminfo").read_text().split()
        info["memory_GiB"] = round(int(meminfo[meminfo.index("MemTotal:") + 1]) / 1024**2, 1)
    except (OSError, ValueError):
        pass
    return info


def revision() -> str:
    """The checkout's commit, and whether it had local changes (the figures are of the code as it was)."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" with local changes" if dirty else "")


def disk_of(path: Path) -> str:
    """The device and file system ``path`` is on (from /proc/mounts)."""
    best = ("", "", "")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, fstype = line.split()[:3]
            if str(path.resolve()).startswith(mount) and len(mount) > len(best[1]):
                best = (device, mount, fstype)
    except OSError:
        return "unknown"
    return f"{best[0]} ({best[2]}, mounted on {best[1]})"


def _figure(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def print_result(result: CaseResult) -> None:
    print(f"\n== {result.name}: {result.summary} ({result.seconds:.1f} s with setup)")
    for note in result.notes:
        print(f"   {note}")
    if result.series:
        width = max(32, *(len(label) for label in result.series))
        print(f"   {'series':<{width}} {'median':>10} {'min':>10} {'max':>10}  rate (of the median)")
        for label, series in result.series.items():
            rates = ", ".join(rate_text(unit, rate) for unit, rate in series.rates().items())
            low = min(series.seconds) if series.seconds else float("nan")
            high = max(series.seconds) if series.seconds else float("nan")
            print(
                f"   {label:<{width}} {seconds_text(series.median):>10} {seconds_text(low):>10} "
                f"{seconds_text(high):>10}  {rates}{'  ' + series.note if series.note else ''}"
            )
    for key, value in result.figures.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            columns = list(next(iter(value.values())))
            print(f"   {key}:")
            print(f"     {'':<22}" + "".join(f"{c:>26}" for c in columns))
            for row, cells in value.items():
                print(
                    f"     {row:<22}"
                    + "".join(f"{seconds_text(cells.get(c, float('nan'))):>26}" for c in columns)
                )
        elif isinstance(value, dict):
            print(f"   {key}: " + ", ".join(f"{k}={_figure(v)}" for k, v in value.items()))
        else:
            print(f"   {key} = {_figure(value)}")
    for target in result.targets:
        mark = {MET: "MET", NOT_MET: "NOT MET"}.get(target.verdict, "NOT MEASURED")
        print(f"   target {target.text}: {target.measured or '-'} -> {mark} ({target.why})")
    if result.error:
        print(f"   ERROR: {result.error}")
    sys.stdout.flush()


def headline(results: dict[str, CaseResult], commit: str) -> str:
    """The three figures whose history BENCHMARKS.md keeps (issue 45), with the commit, from the cases that
    ran: the warmed job's loop over the floor's (seed-e2e), the push and the warm of 2,000 entries through
    GCS 30 ms away (gcs-latency); empty when neither ran."""
    parts: list[str] = []
    seed = results.get("seed-e2e")
    if seed is not None and "warmed loop / floor loop" in seed.figures:
        parts.append(f"loop ratio {seed.figures['warmed loop / floor loop']:.3f}x")
    gcs = results.get("gcs-latency")
    if gcs is not None:
        for label in ("push", "warm()"):
            if label in gcs.series and gcs.series[label].seconds:
                parts.append(f"GCS {label.strip('()')} {gcs.series[label].median:.2f} s at +30 ms")
    if not parts:
        return ""
    return f"{commit}: " + ", ".join(parts) + f"; load average {os.getloadavg()[0]:.1f}"


def select(only: str | None, skip: str | None, quick: bool) -> tuple[list[str], list[str]]:
    """The cases to run in order, and those added because a chosen case's ratios need them."""
    unknown = [n for n in (only or "").split(",") + (skip or "").split(",") if n and n not in CASES]
    if unknown:
        raise SystemExit(f"unknown case {', '.join(unknown)}; known: {', '.join(ORDER)}")
    skipped = {n for n in (skip or "").split(",") if n}
    if only:
        chosen = {n for n in only.split(",") if n}
    else:
        chosen = {n for n in ORDER if not (quick and CASES[n].full_only)}
    chosen -= skipped
    added = {need for n in chosen for need in CASES[n].needs} - chosen
    return [n for n in ORDER if n in chosen | added], sorted(added)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 repetitions (CI-sized)")
    parser.add_argument("--only", metavar="NAME[,NAME]", help=f"run only these: {', '.join(ORDER)}")
    parser.add_argument("--skip", metavar="NAME[,NAME]", help="leave these out (index-scale is slow)")
    parser.add_argument("--reps", type=int, default=MIN_REPS, help=f"repetitions (at least {MIN_REPS})")
    parser.add_argument("--json", metavar="PATH", type=Path, help="write every figure to PATH")
    parser.add_argument("--scratch", metavar="DIR", type=Path, help="scratch directory (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--gcs-timeout", type=float, help="seconds per push or warm in gcs-latency")
    parser.add_argument("--index-entries", type=int, help="entries in index-scale (default 1,000,000)")
    parser.add_argument("--seed-shapes", type=int, help="shapes in seed-e2e (default 2,000)")
    args = parser.parse_args(argv)
    if args.reps < MIN_REPS:
        parser.error(f"--reps must be at least {MIN_REPS}")
    names, added = select(args.only, args.skip, args.quick)

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("xla_cache").setLevel(logging.ERROR)  # a failed warm is reported by its case

    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="xla-cache-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    ctx = Context(
        quick=args.quick,
        reps=args.reps,
        scratch=scratch,
        options={
            "gcs_timeout": args.gcs_timeout,
            "index_entries": args.index_entries,
            "seed_shapes": args.seed_shapes,
        },
    )
    info = machine()
    info["disk"] = disk_of(scratch)
    info["revision"] = revision()
    command = "python -m bench " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    print(f"{command.strip()}")
    print(
        f"machine: {info['cpus_usable']} CPUs ({info.get('cpu_model', '?')}), "
        f"{info.get('memory_GiB', '?')} GiB, "
        f"disk {info['disk']}, Python {info['python']}, load average {info['load_average'][0]:.2f}"
    )
    print(f"code: {info['revision']}")
    print(f"cases: {', '.join(names)}" + (f" ({', '.join(added)} added: needed for ratios)" if added else ""))
    print(f"{'quick' if args.quick else 'full'} sizes, {args.reps} repetitions; setup is not timed")
    started = time.monotonic()
    started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    failed = False
    try:
        for name in names:
            prepare = CASES[name].prepare
            if prepare is not None and args.quick:  # quick: start the servers side by side first
                prepare(ctx)
        ctx.wait_started()  # nothing starts while a case measures
        for name in names:
            registered = CASES[name]
            result = CaseResult(name, registered.summary)
            case_started = time.monotonic()
            try:
                registered.run(ctx, result)
            except Exception as exc:
                failed = True
                result.error = f"{type(exc).__name__}: {exc}"
                result.notes.append(traceback.format_exc(limit=-3).strip().splitlines()[-1])
            result.seconds = time.monotonic() - case_started
            if result.error:
                failed = True
            ctx.results[name] = result
            print_result(result)
    finally:
        ctx.close()
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    info["load_average_end"] = os.getloadavg()
    targets = [(name, t) for name, r in ctx.results.items() for t in r.targets]
    if targets:
        print("\n== targets")
        for name, target in targets:
            print(f"   {name:<12} {target.text:<62} {target.measured or '-':>14}  {target.verdict}")
    if line := headline(ctx.results, info["revision"]):
        print(f"\n== headline (BENCHMARKS.md keeps its history)\n   {line}")
    print(f"\ntotal {time.monotonic() - started:.0f} s; load average now {info['load_average_end'][0]:.2f}")
    if args.json:
        document = {
            "command": command.strip(),
            "date": started_at,
            "seconds": round(time.monotonic() - started, 1),
            "quick": args.quick,
            "reps": args.reps,
            "machine": info,
            "cases": {name: result.as_dict() for name, result in ctx.results.items()},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
