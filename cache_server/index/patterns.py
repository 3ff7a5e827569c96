"""A token's namespace patterns in SQL: the one translation every query that filters by a token's scope
uses, matching exactly as the token's own check does (``fnmatchcase``: ``*`` any run of characters, ``?``
one, case-sensitive), so a query's LIMIT applies to the namespaces the token reaches and no others. And a
prefix, matched as exactly (a run id looked up by its first characters)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, String, and_, or_
from sqlalchemy.orm import InstrumentedAttribute

from cache_server.index.database import Database

__all__ = ["pattern_to_like", "scope_matches", "starts_with"]


def pattern_to_like(pattern: str) -> str:
    """A namespace pattern (``*`` any run of characters, ``?`` one) as a LIKE pattern with ``\\`` escapes
    (the patterns' other characters are letters, digits, ``.``, ``_`` and ``-``: only ``_`` is special)."""
    return (
        pattern.replace("\\", "\\\\")
        .replace("%", "\\%")
        .replace("_", "\\_")
        .replace("*", "%")
        .replace("?", "_")
    )


def scope_matches(
    db: Database, column: InstrumentedAttribute[str], patterns: Sequence[str]
) -> ColumnElement[bool]:
    """``column`` (a namespace name) matched by any of ``patterns``, case-sensitively. SQLite's LIKE ignores
    ASCII case, so there it is GLOB, where a pattern's ``*`` and ``?`` mean the same and its other characters
    (those of namespace names) stand for themselves."""
    if db.engine.dialect.name == "sqlite":
        return or_(*(column.op("GLOB")(pattern) for pattern in patterns))
    return or_(*(column.cast(String).like(pattern_to_like(pattern), escape="\\") for pattern in patterns))


def starts_with(db: Database, column: InstrumentedAttribute[str], prefix: str) -> ColumnElement[bool]:
    """``column`` starts with ``prefix``, case-sensitively and every character of ``prefix`` itself: GLOB on
    SQLite (whose LIKE ignores ASCII case), its ``*``, ``?`` and ``[`` each as a one-character class;
    LIKE elsewhere, its ``%``, ``_`` and ``\\`` escaped. ``column >= prefix`` beside it lets the primary
    key's order start the scan at the prefix."""
    if db.engine.dialect.name == "sqlite":
        glob = "".join(f"[{c}]" if c in "*?[" else c for c in prefix)
        matches = column.op("GLOB", is_comparison=True)(f"{glob}*")
    else:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        matches = column.like(f"{escaped}%", escape="\\")
    return and_(matches, column >= prefix)
