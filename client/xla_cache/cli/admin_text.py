"""What ``xla-cache stats``, ``evict``, ``tokens`` and ``purge-token`` print, and how they read sizes and
durations.

The commands themselves are in :mod:`xla_cache.cli.admin` (one function per subcommand); this module
turns the server's ``/admin/...`` answers into lines a person reads, and parses ``10GiB`` or ``7d`` style
arguments.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

__all__ = [
    "evict_lines",
    "format_bytes",
    "format_seconds",
    "jobs_lines",
    "lookup_line",
    "parse_duration",
    "parse_size",
    "purge_lines",
    "stats_lines",
    "token_lines",
]

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*", re.IGNORECASE)
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_POWERS = "kmgtp"


def parse_size(text: str) -> int:
    """Bytes from ``1234``, ``500M``, ``10GiB``, ``1.5T`` (K, M, G... are powers of 1024)."""
    match = _SIZE.fullmatch(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (examples: 1000000, 500M, 10GiB)")
    number, unit = float(match.group(1)), match.group(2).lower()
    return int(number * 1024 ** (_POWERS.index(unit) + 1 if unit else 0))


def parse_duration(text: str) -> float:
    """Seconds from ``3600``, ``90s``, ``30m``, ``12h``, ``7d``, ``2w``."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise ValueError(f"not a duration: {text!r} (examples: 3600, 12h, 7d)")
    return float(match.group(1)) * _SECONDS[match.group(2).lower()]


def format_bytes(value: float) -> str:
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    index = 0
    while value >= 1024 and index < len(units) - 1:
        value /= 1024
        index += 1
    return f"{value:.0f} {units[index]}" if index == 0 else f"{value:.1f} {units[index]}"


def format_seconds(value: float) -> str:
    for limit, unit, size in ((60, "s", 1), (3600, "min", 60), (86400, "h", 3600)):
        if value < limit:
            return f"{value / size:.1f} {unit}"
    return f"{value / 86400:.1f} days"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
    return [
        "  "
        + "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def jobs_lines(jobs: dict[str, Any] | None, *, indent: str = "  ", days: int = 30) -> list[str]:
    """What the jobs of one scope reported (a ``jobs`` block of the stats): their hit rate, compiles, and
    the compile time paid and saved (each hit: what its entry cost to compile)."""
    if not jobs or not jobs.get("runs"):
        return [f"{indent}what jobs reported: no run reports in the last {days} days"]
    return [
        f"{indent}what jobs reported (runs started in the last {days} days: {jobs['runs']:,})",
        f"{indent}  hit rate     {_rate(jobs['hit_rate'])}  ({jobs['hits']:,} loaded from the cache, "
        f"{jobs['compiles']:,} compiled: xla-cache runs says why)",
        f"{indent}  compiling    {format_seconds(jobs['compile_seconds'])} paid, "
        f"{format_seconds(jobs['saved_seconds'])} saved by hits (what each loaded entry cost to compile)",
    ]


def lookup_line(counters: dict[str, Any], *, indent: str = "  ") -> str:
    """The server's own lookups of one scope: never a hit rate of jobs, never time saved (a download may
    go unused, and a job that compiles without asking makes none)."""
    return (
        f"{indent}lookups      {counters['hits']:,} found, {counters['misses']:,} not found (manifests and "
        "GETs the server answered; not the jobs' hit rate)"
    )


def stats_lines(stats: dict[str, Any], *, graphs: int = 5) -> list[str]:
    """The server's part of ``stats``, each block named by its scope: what every namespace's jobs
    reported, what the server stores and served, a table of namespaces (their jobs' numbers), and the
    graphs that cost most to compile."""
    t = stats["totals"]
    lines = [
        "server (every namespace)",
        *jobs_lines(stats.get("jobs")),
        f"  stored       {t['entries']:,} entries, {format_bytes(t['bytes'])}",
        lookup_line(t),
        f"  served       {format_bytes(t['bytes_served'])}",
        f"  uploads      {t['uploads']:,}    evictions {t['evictions']:,}",
    ]
    namespaces = stats.get("namespaces", [])
    if namespaces:
        lines.append(
            "namespaces (largest first; runs, hit rate, compiled, paid and saved: their jobs' reports)"
        )
        rows = [
            ["namespace", "framework", "entries", "bytes", "runs", "hit rate", "compiled", "paid", "saved"]
        ]
        for n in namespaces:
            jobs = n.get("jobs") or {}
            rows.append(
                [
                    n["namespace"],
                    n.get("framework") or "-",
                    f"{n['entries']:,}",
                    format_bytes(n["bytes"]),
                    f"{jobs.get('runs', 0):,}",
                    _rate(jobs.get("hit_rate")),
                    f"{jobs.get('compiles', 0):,}",
                    format_seconds(jobs.get("compile_seconds", 0.0)),
                    format_seconds(jobs.get("saved_seconds", 0.0)),
                ]
            )
        lines += _table(rows, right={2, 3, 4, 5, 6, 7, 8})
        if stats.get("next_after") is not None:
            count = stats.get("namespace_count", len(namespaces))
            lines.append(
                f"  ({len(namespaces):,} of {count:,} namespaces; the next page: "
                f"xla-cache stats --all --after {shlex.quote(stats['next_after'])})"
            )
    stored_by = [u for u in stats.get("stored_by", []) if u["entries"]]
    if stored_by and any(u["token_id"] is not None for u in stored_by):
        lines.append("stored by token (what is in the cache now)")
        lines += [
            f"  {_token_label(u):<40} {u['entries']:>9,} entries  {format_bytes(u['bytes']):>10}"
            for u in stored_by
        ]
    top = stats.get("top_graphs", [])[:graphs]
    if top:
        lines.append("graphs that cost most to compile (compile seconds paid, then compiles)")
        for g in top:
            where = f"  traced at {g['source']}" if g.get("source") else ""
            plural = "s" if g["variants"] != 1 else " "
            lines.append(
                f"  {g.get('compile_seconds', 0.0):>8.1f} s  {g['entries']:>5} compiles  {g['variants']:>4} "
                f"variant{plural}  {g['module']}  [{g['namespace']}]{where}"
            )
            lines += [f"         e.g. {shape}" for shape in g.get("examples", [])[:2]]
    return lines


def _token_label(usage: dict[str, Any]) -> str:
    token = usage.get("token")
    if token is not None:
        revoked = ", revoked" if token.get("revoked_at") else ""
        return f"{token['name']} ({token['id']}, {token['role']}{revoked})"
    return "(auth off)" if usage["token_id"] is None else f"(unknown token {usage['token_id']})"


def token_lines(listing: dict[str, Any]) -> list[str]:
    """Every token with its role, its namespace patterns, its state and what it stored."""
    rows = [["id", "name", "role", "namespaces", "state", "entries", "bytes"]]
    for usage in listing.get("tokens", []):
        token = usage.get("token")
        if token is None:
            who = ["-", "(auth off)" if usage["token_id"] is None else "(unknown token)", "-", "-", "-"]
            if usage["token_id"] is not None:
                who[0] = usage["token_id"]
        else:
            state = "revoked " + token["revoked_at"][:10] if token.get("revoked_at") else "active"
            if token.get("metrics_off"):
                state += ", runs uncounted"
            patterns = ",".join(token["namespaces"]) if token.get("namespaces") is not None else "any"
            who = [token["id"], token["name"], token["role"], patterns, state]
        rows.append([*who, f"{usage['entries']:,}", format_bytes(usage["bytes"])])
    if len(rows) == 1:
        return ["no tokens yet (xla-cache-server token create --name NAME --role read|write|admin)"]
    return ["tokens and what each stored (in the cache now), most bytes first", *_table(rows, right={5, 6})]


def quota_lines(quotas: list[dict[str, Any]]) -> list[str]:
    """Quotas with what their namespace or token stores now (uploads past one are refused with 507)."""
    if not quotas:
        return ["no quotas (xla-cache quota --namespace NAME --max-entries N --max-bytes SIZE)"]
    rows = [["kind", "namespace or token id", "entries", "max entries", "bytes", "max bytes"]]
    for q in quotas:
        most_entries = f"{q['max_entries']:,}" if q["max_entries"] is not None else "-"
        most_bytes = format_bytes(q["max_bytes"]) if q["max_bytes"] is not None else "-"
        rows.append(
            [q["kind"], q["subject"], f"{q['entries']:,}", most_entries, format_bytes(q["bytes"]), most_bytes]
        )
    return ["quotas (uploads past one are refused with 507)", *_table(rows, right={2, 3, 4, 5})]


def purge_lines(result: dict[str, Any], *, shown: int = 20) -> list[str]:
    """What a purge revoked and removed (or, on a dry run, would remove)."""
    names = ", ".join(f"{t['name']} ({t['id']})" for t in result["tokens"])
    lines = [f"token {names}: " + (f"revoked {', '.join(result['revoked'])}" if result["revoked"] else "")]
    if not result["revoked"]:
        lines[0] += "not revoked now" + (" (dry run)" if result["removed"]["dry_run"] else "")
    return lines + evict_lines(result["removed"], shown=shown, verb="remove")


def evict_lines(result: dict[str, Any], *, shown: int = 20, verb: str = "evict") -> list[str]:
    """What an eviction did, or on a dry run what it would do and the first entries it would remove."""
    count, freed = result["evicted"], format_bytes(result["freed_bytes"])
    if not result["dry_run"]:
        lines = [f"{verb.removesuffix('e')}ed {count:,} entries, freed {freed}"]
        if result.get("remaining"):
            lines.append(
                f"{result['remaining']:,} more arrived while it ran and remain: run it again to remove them"
            )
        return lines
    lines = [f"dry run: would {verb} {count:,} entries, freeing {freed} (nothing was removed)"]
    keys = result.get("keys") or []
    if keys:
        lines.append("least recently used first:")
        lines += [
            f"  {k['namespace']}/{k['key']}  {format_bytes(k['size'])}  last used {k['last_access_at']}"
            for k in keys[:shown]
        ]
        if count > shown:
            lines.append(f"  ... and {count - shown:,} more")
    return lines
