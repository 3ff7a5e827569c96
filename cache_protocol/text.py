"""Free text a client sends and an operator reads (a run's host, a graph's module name): what may be in it,
and how to show text stored before that rule, or from anywhere else, on a terminal or a page.

Refused: Unicode's control characters (category Cc: C0 and C1, such as ESC and U+009B, the 8-bit CSI, which
a terminal takes as the start of an escape sequence), format characters (Cf: bidi overrides, zero-width
characters) and the line and paragraph separators (Zl, Zp). Shown: each such character as ``\\u009b``.
Standard library only: the server checks with it, the client prints with it.
"""

from __future__ import annotations

import unicodedata

__all__ = ["UNPRINTABLE_CATEGORIES", "shown", "unprintable"]

UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _unprintable(char: str) -> bool:
    return unicodedata.category(char) in UNPRINTABLE_CATEGORIES


def unprintable(text: str) -> str | None:
    """Why ``text`` may not be stored (its first unprintable character, named), or None."""
    for index, char in enumerate(text):
        if _unprintable(char):
            name = unicodedata.name(char, "a control character")
            return f"character {index} is U+{ord(char):04X} ({name}), which a terminal or page would not show"
    return None


def shown(text: str) -> str:
    """``text`` with each unprintable character written as ``\\uXXXX`` (a backslash itself stays as it is)."""
    if not any(_unprintable(char) for char in text):
        return text
    return "".join(f"\\u{ord(char):04x}" if _unprintable(char) else char for char in text)
