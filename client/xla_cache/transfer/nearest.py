"""Why a warm found few or no entries: the server's nearest populated namespaces, and the line that says it.

After its manifest, a warm asks the server (``POST /v1/namespaces/{ns}/nearest`` with its fingerprint) which
populated namespaces of its framework are nearest, and keeps the answer when its own namespace is *thin*:
empty, or holding under :data:`THIN_FRACTION` of the nearest one's entries (a job whose runtime differs in
one field from the jobs that filled the cache). Asking is fail-open: any trouble is logged at debug level
and the warm goes on without it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xla_cache.http.deadline import Deadline
from xla_cache.logs import logger

if TYPE_CHECKING:
    from xla_cache.http.api import CacheApi

__all__ = [
    "ASK_SECONDS",
    "THIN_FRACTION",
    "NearDifference",
    "NearNamespace",
    "ask_nearest",
    "is_thin",
    "nearest_line",
]


ASK_SECONDS = 2.0  # the most a warm waits for the nearest namespaces (less when its own bound is nearer)
THIN_FRACTION = 0.1
"""A namespace is thin when it holds fewer entries than this fraction of its nearest populated one's."""


@dataclass(frozen=True)
class NearDifference:
    """A fingerprint field (for a flag: its variable, ``XLA_FLAGS``) and both values (None: unset)."""

    field: str
    ours: Any
    theirs: Any
    text: str  # "<ours> (theirs: <theirs>)"


@dataclass(frozen=True)
class NearNamespace:
    """A populated namespace near the warmed one: its entries, last use (ISO 8601) and differences."""

    namespace: str
    entries: int
    last_used_at: str
    differences: list[NearDifference] = field(default_factory=list)


def _parse(body: Mapping[str, Any]) -> list[NearNamespace]:
    found = []
    for near in body.get("nearest") or []:
        diffs = [
            NearDifference(str(d["field"]), d.get("ours"), d.get("theirs"), str(d.get("text", "")))
            for d in near.get("differences") or []
        ]
        found.append(
            NearNamespace(str(near["namespace"]), int(near["entries"]), str(near["last_used_at"]), diffs)
        )
    return found


def is_thin(entries: int, nearest: list[NearNamespace]) -> bool:
    """Whether a namespace of ``entries`` is empty or thin beside the nearest populated one."""
    return bool(nearest) and (entries == 0 or entries < THIN_FRACTION * nearest[0].entries)


def ask_nearest(
    api: CacheApi, namespace: str, fingerprint: Mapping[str, Any], entries: int, deadline: Deadline
) -> list[NearNamespace]:
    """The nearest populated namespaces when ``namespace`` (holding ``entries``) is thin, else []. Never
    raises: trouble (an older server, a refusal, a timeout, a body that does not parse) is logged at debug
    level."""
    try:
        # its own short bound: an answer that explains must not spend the warm's whole timeout
        bound = Deadline(min(ASK_SECONDS, max(0.0, deadline.remaining())))
        nearest = _parse(api.nearest(namespace, fingerprint or None, bound))
    except Exception as exc:  # fail-open: this only explains, it must never cost the warm anything
        logger.debug("xla-cache: could not ask for the namespaces nearest to %s: %s", namespace, exc)
        return []
    return nearest if is_thin(entries, nearest) else []


def _short(namespace: str) -> str:
    prefix, _, digest = namespace.rpartition("-")
    return f"{prefix}-{digest[:8]}…" if prefix and len(digest) > 8 else namespace


def _ago(iso: str, now: dt.datetime) -> str:
    try:
        when = dt.datetime.fromisoformat(iso)
    except ValueError:
        return "at an unknown time"
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    seconds = max(0.0, (now - when).total_seconds())
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _entries(count: int) -> str:
    return f"{count:,} {'entry' if count == 1 else 'entries'}"


def nearest_line(entries: int, nearest: list[NearNamespace], now: dt.datetime | None = None) -> str:
    """One line: ``namespace new (0 entries); nearest: <ns>… (32 entries, used 13 s ago) differs in
    XLA_FLAGS: --xla_cpu_enable_fast_math=true (theirs: unset)``."""
    if not nearest:
        return ""
    near = nearest[0]
    now = now or dt.datetime.now(dt.UTC)
    state = "new" if entries == 0 else "thin"
    text = (
        f"namespace {state} ({_entries(entries)}); nearest: {_short(near.namespace)} "
        f"({_entries(near.entries)}, used {_ago(near.last_used_at, now)})"
    )
    if not near.differences:
        return text + " has the same fingerprint"
    by_field: dict[str, list[str]] = {}
    for diff in near.differences:
        by_field.setdefault(diff.field, []).append(diff.text)
    return (
        text + " differs in " + "; ".join(f"{name}: {', '.join(texts)}" for name, texts in by_field.items())
    )
