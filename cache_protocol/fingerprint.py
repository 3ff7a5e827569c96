"""The XLA flags in a runtime fingerprint, and how two fingerprints differ.

Both packages import it: the client to normalise ``XLA_FLAGS`` and ``LIBTPU_INIT_ARGS`` into the
fingerprint, the server to say which fields (and which flags) set two namespaces apart.

A fingerprint carries each flag variable twice: as a digest (``xla_flags_digest``, part of the namespace
id) and as a map of flag name to value (``xla_flags``, left out of the namespace id, so ids stay what they
were before the maps existed). A flag given twice keeps its last value, as XLA reads it; a flag given
without ``=`` maps to None. With ``XLA_CACHE_REDACT_FLAG_VALUES`` set, the client replaces each value by
:data:`REDACTED` (the names stay): the server can then still say which flags one namespace has and the
other lacks, but not what differs in a flag both have.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FLAG_VARIABLES",
    "REDACTED",
    "UNHASHED_FIELDS",
    "Difference",
    "differences",
    "flag_text",
    "flags_digest",
    "hashed_part",
    "parse_flags",
    "redact",
]

REDACTED = "<redacted>"
"""What a flag's value reads as when the client redacts values."""


@dataclass(frozen=True)
class FlagVariable:
    """One environment variable of XLA flags and the two fingerprint fields it gives."""

    variable: str  # as the user sets it: XLA_FLAGS
    digest_field: str  # hashed into the namespace id
    map_field: str  # the normalised flags, not hashed


FLAG_VARIABLES = (
    FlagVariable("XLA_FLAGS", "xla_flags_digest", "xla_flags"),
    FlagVariable("LIBTPU_INIT_ARGS", "libtpu_init_args_digest", "libtpu_init_args"),
)
UNHASHED_FIELDS = frozenset(flag.map_field for flag in FLAG_VARIABLES)
"""Fingerprint fields the namespace id leaves out: they restate what a digest already covers."""


def parse_flags(value: str | None) -> dict[str, str | None]:
    """The ``--xla*`` flags of a flag string, by name (sorted), each with its last value (None: no ``=``).

    Other tokens are ignored; unbalanced quotes fall back to splitting on whitespace, as XLA does.
    """
    if not value:
        return {}
    try:
        tokens = shlex.split(value)
    except ValueError:
        tokens = value.split()
    last: dict[str, str | None] = {}
    for token in tokens:
        if token.startswith("--xla"):
            name, equals, flag_value = token.partition("=")
            last[name] = flag_value if equals else None
    return {name: last[name] for name in sorted(last)}


def flag_text(name: str, value: str | None) -> str:
    """A flag as written on a command line: ``--name=value``, or ``--name`` without a value."""
    return name if value is None else f"{name}={value}"


def flags_digest(value: str | None) -> str | None:
    """SHA-256 (hex) of the normalised ``--xla*`` flags of a flag string, or None when it has none: the
    flags sorted by name, each as its last setting, one per line."""
    flags = parse_flags(value)
    if not flags:
        return None
    return hashlib.sha256("\n".join(flag_text(n, v) for n, v in flags.items()).encode()).hexdigest()


def redact(flags: Mapping[str, str | None]) -> dict[str, str | None]:
    """The flags with every value replaced by :data:`REDACTED` (a flag without a value keeps none)."""
    return {name: None if value is None else REDACTED for name, value in flags.items()}


def hashed_part(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """The fingerprint less :data:`UNHASHED_FIELDS`: what the namespace id is computed from."""
    return {key: value for key, value in fingerprint.items() if key not in UNHASHED_FIELDS}


@dataclass(frozen=True)
class Difference:
    """One way two fingerprints differ: a field (for a flag: its variable, ``XLA_FLAGS``) and both values
    (None: unset). ``text`` reads ``<ours> (theirs: <theirs>)``."""

    field: str
    ours: Any
    theirs: Any

    @property
    def text(self) -> str:
        return f"{_shown(self.ours)} (theirs: {_shown(self.theirs)})"

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "ours": self.ours, "theirs": self.theirs, "text": self.text}


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    return value if isinstance(value, str) else str(value)


def _flag_differences(variable: str, ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[Difference]:
    """The flags of one variable that differ. A flag both have with a redacted value may differ or not: those
    are named only when nothing else explains the differing digests."""
    seen: list[Difference] = []
    redacted: list[Difference] = []
    for name in sorted(set(ours) | set(theirs)):
        mine = flag_text(name, ours[name]) if name in ours else None
        other = flag_text(name, theirs[name]) if name in theirs else None
        if mine is not None and other is not None and REDACTED in (ours[name], theirs[name]):
            redacted.append(Difference(variable, mine, other))
        elif mine != other:
            seen.append(Difference(variable, mine, other))
    return seen or redacted


def differences(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> tuple[int, list[Difference]]:
    """How many hashed fields of two fingerprints differ, and the differences, field by field (sorted).

    A differing flags digest is resolved to the flags that differ when both fingerprints carry the flag
    map; it stays the digests otherwise (a fingerprint written before the maps existed). It counts as one
    field however many flags differ.
    """
    flag_fields = {flag.digest_field: flag for flag in FLAG_VARIABLES}
    mine, other = hashed_part(ours), hashed_part(theirs)
    count, found = 0, []
    for field in sorted(set(mine) | set(other)):
        if mine.get(field) == other.get(field):
            continue
        count += 1
        flag = flag_fields.get(field)
        our_map, their_map = (
            ours.get(flag.map_field) if flag else None,
            theirs.get(flag.map_field) if flag else None,
        )
        if flag is not None and isinstance(our_map, Mapping) and isinstance(their_map, Mapping):
            resolved = _flag_differences(flag.variable, our_map, their_map)
            if resolved:
                found += resolved
                continue
        found.append(Difference(field, mine.get(field), other.get(field)))  # a digest stays one
    return count, found
