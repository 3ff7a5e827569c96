"""``xla-cache runs``: the runs jobs reported (``GET /admin/runs``), or one run with its compiles and why
each happened (``GET /admin/runs/{id}``). Registered by :func:`add_runs_command`; ``--json`` prints the
server's answer as it came.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import TYPE_CHECKING, Any

from cache_protocol.runs import FRAMEWORKS, MISS_REASONS
from xla_cache.cli.admin_text import format_bytes, parse_duration
from xla_cache.cli.common import add_common, admin_api, config_of, emit, namespace_name
from xla_cache.errors import ClientError, ServerError
from xla_cache.http.deadline import Deadline

if TYPE_CHECKING:
    from xla_cache.http.admin_api import AdminApi

__all__ = ["add_runs_command", "cmd_runs", "run_lines", "runs_lines", "since_of"]

DEFAULT_LIMIT = 20


def since_of(text: str, now: dt.datetime | None = None) -> str:
    """``--since``: an ISO time as it is, or a duration (``90m``, ``12h``, ``7d``) back from ``now``."""
    try:
        seconds = parse_duration(text)
    except ValueError:
        try:
            return dt.datetime.fromisoformat(text).isoformat()
        except ValueError:
            raise ClientError(
                f"--since {text!r}: not a time (2026-12-01T08:00) nor a duration (12h, 7d)"
            ) from None
    now = now or dt.datetime.now(dt.timezone.utc)
    return (now - dt.timedelta(seconds=seconds)).isoformat(timespec="seconds")


def _time(value: Any) -> str:
    """A time the server sent (ISO text, or unix seconds) as ``YYYY-MM-DD HH:MM:SS`` UTC."""
    if value is None:
        return "-"
    try:
        if isinstance(value, (int, float)):
            moment = dt.datetime.fromtimestamp(value, dt.timezone.utc)
        else:
            moment = dt.datetime.fromisoformat(str(value))
            if moment.tzinfo is not None:
                moment = moment.astimezone(dt.timezone.utc)
    except (ValueError, OverflowError, OSError):
        return str(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _rate(run: dict[str, Any]) -> str:
    rate = run.get("hit_rate")
    if rate is None:
        looked = int(run.get("hits") or 0) + _count(run.get("misses"))
        rate = int(run.get("hits") or 0) / looked if looked else None
    return "-" if rate is None else f"{100 * float(rate):.1f}%"


def _count(value: Any) -> int:
    """A count, or the length of a list (a run's detail lists its misses)."""
    return len(value) if isinstance(value, list) else int(value or 0)


def runs_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The run listing as a table, newest first."""
    if not runs:
        return ["no runs reported (that this token may see)"]
    header = (
        f"{'RUN':<12}  {'STARTED (UTC)':<19}  {'FRAMEWORK':<9}  {'HOST':<12}  {'PROC':>4}  {'HITS':>6}  "
        f"{'MISSES':>6}  "
        f"{'HIT RATE':>8}  {'COMPILE S':>9}  {'STATE':<7}  NAMESPACE"
    )
    lines = [header]
    for run in runs:
        state = "ended" if run.get("ended_at") else "running"
        lines.append(
            f"{str(run.get('run_id', ''))[:12]:<12}  {_time(run.get('started_at')):<19}  "
            f"{run.get('framework', '')!s:<9}  {str(run.get('host', ''))[:12]:<12}  "
            f"{int(run.get('process_index') or 0):>4}  {int(run.get('hits') or 0):>6}  "
            f"{_count(run.get('misses')):>6}  {_rate(run):>8}  "
            f"{float(run.get('compile_seconds') or 0):>9.2f}  {state:<7}  {run.get('namespace', '')}"
        )
    return lines


def run_lines(run: dict[str, Any]) -> list[str]:
    """One run: its numbers, then each compile with its reason."""
    listed = run.get("misses")
    misses: list[dict[str, Any]] = listed if isinstance(listed, list) else []
    total = int(run.get("misses_total") or len(misses))
    ended = run.get("ended_at")
    state = f"ended {_time(ended)}" if ended else f"running (last report {_time(run.get('updated_at'))})"
    lines = [
        f"run          {run.get('run_id')}",
        f"namespace    {run.get('namespace')}",
        f"framework    {run.get('framework')} on {run.get('host')} (process {run.get('process_index', 0)})",
        f"started      {_time(run.get('started_at'))}; {state}",
        f"warm         {int(run.get('warm_entries') or 0)} entries, "
        f"{format_bytes(float(run.get('warm_bytes') or 0))}, {float(run.get('warm_seconds') or 0):.2f} s",
        f"hits         {int(run.get('hits') or 0)} (hit rate {_rate(run)})",
        f"compiles     {total}; {float(run.get('compile_seconds') or 0):.2f} s paid, "
        f"{float(run.get('saved_seconds') or 0):.2f} s saved by hits",
        f"uploaded     {int(run.get('uploaded_entries') or 0)} entries; "
        f"{int(run.get('live_entries') or 0)} delivered live; "
        f"{int(run.get('load_failures') or 0)} load failures"
        + (
            f"; {int(run.get('unverified_entries') or 0)} skipped (signed by no trusted key)"
            if run.get("unverified_entries")
            else ""
        ),
    ]
    reasons = run.get("reasons") or {}
    if reasons:
        counted = int(run.get("reasons_counted") or 0)
        stored = int(run.get("misses_stored") or counted)
        of = f" (over the {counted:,} of {stored:,} listed so far)" if counted < stored else ""
        order = {reason: place for place, reason in enumerate(MISS_REASONS)}
        by_reason = sorted(reasons.items(), key=lambda item: order.get(item[0], len(order)))
        lines.append(f"reasons      {', '.join(f'{reason} {count:,}' for reason, count in by_reason)}{of}")
    if misses:
        first = int(run.get("offset") or 0)
        span = f"{first + 1}-{first + len(misses)}" if first else f"{len(misses)}"
        lines.append(f"misses ({span} of {total} listed):")
    for miss in misses:
        seconds = miss.get("compile_seconds")
        spent = f"{float(seconds):.2f} s" if seconds is not None else "-"
        where = f" (at {miss['source']})" if miss.get("source") else ""
        lines.append(
            f"  {str(miss.get('module') or '-')[:24]:<24}  {str(miss.get('key', ''))[:24]:<24}  "
            f"{miss.get('reason') or 'unknown'!s:<13}  {spent:>8}  {miss.get('detail') or ''}{where}".rstrip()
        )
    advice = {str(m.get("reason")): str(m.get("advice")) for m in misses if m.get("advice")}
    if advice:
        lines.append("what to do:")
        lines.extend(f"  {reason:<13}  {text}" for reason, text in advice.items())
    padded = sorted({str(m["module"]) for m in misses if m.get("reason") in _BUCKETED and m.get("module")})
    if padded:
        lines.append("bucketing of the graphs that compiled at new shapes or sizes:")
        namespace = run.get("namespace")
        lines.extend(f"  xla-cache graphs {namespace} --module {module}" for module in padded)
    return lines


_BUCKETED = ("new_shapes", "baked_sizes")


def _run(api: AdminApi, args: argparse.Namespace) -> dict[str, Any]:
    """One run with the page of misses asked (``--offset``, ``--misses``), or every miss (``--all``: page
    after page)."""
    deadline = Deadline(args.timeout)
    if not args.all:
        return api.admin_run(args.run_id, deadline, offset=args.offset, limit=args.misses)
    data = api.admin_run(args.run_id, deadline, offset=0, limit=PAGE)
    misses = list(data.get("misses") or [])
    stored = int(data.get("misses_stored") or 0)
    while len(misses) < stored:
        more = api.admin_run(str(data["run_id"]), deadline, offset=len(misses), limit=PAGE)
        page = list(more.get("misses") or [])
        if not page:
            break
        misses.extend(page)
    data["misses"] = misses
    return data


PAGE = 1000  # misses asked per request with --all (the server's page bound)


def cmd_runs(args: argparse.Namespace) -> int:
    """List the runs reported (filters), or show one run and why each of its compiles happened."""
    config = config_of(args)
    with admin_api(config) as api:
        try:
            if args.run_id:
                data = _run(api, args)
                lines = run_lines(data)
            else:
                params = {
                    "namespace": args.namespace,
                    "framework": args.framework,
                    "host": args.host,
                    "since": since_of(args.since) if args.since else None,
                    "limit": args.limit,
                }
                data = api.admin_runs(params, Deadline(args.timeout))
                lines = runs_lines(list(data.get("runs") or []))
        except ServerError as exc:
            if exc.status == 404 and exc.code in ("", "not_found") and not args.run_id:
                raise ClientError(
                    f"{exc.reason}: it keeps no run reports, or is not the cache server"
                ) from None
            raise
    emit(args, data, lines)
    return 0


def add_runs_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``runs`` subcommand's parser."""
    runs = sub.add_parser(
        "runs", help="the runs jobs reported (hits, compiles, compile seconds), or one run and its compiles"
    )
    add_common(runs, timeout=30.0)
    runs.add_argument("run_id", nargs="?", help="show this run, with each compile and why it happened")
    runs.add_argument("--namespace", type=namespace_name, help="only runs of this namespace")
    runs.add_argument("--framework", choices=FRAMEWORKS, help="only runs of this framework")
    runs.add_argument("--host", help="only runs of this host")
    runs.add_argument("--since", help="only runs started since: an ISO time, or a duration back (12h, 7d)")
    runs.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, help=f"at most this many runs (default {DEFAULT_LIMIT})"
    )
    runs.add_argument("--misses", type=int, default=100, help="with RUN_ID: misses listed (default 100)")
    runs.add_argument("--offset", type=int, default=0, help="with RUN_ID: list the misses from this one")
    runs.add_argument("--all", action="store_true", help="with RUN_ID: list every miss (page after page)")
    runs.set_defaults(func=cmd_runs)
