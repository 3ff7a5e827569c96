"""A graph's shapes as data: the text :mod:`~cache_server.parsing.hlo` records, read back into parameters
and dimensions, and compared.

The text is ``(<param>, <param>, ...) -> <result>`` where a shape is ``f32[8,128]`` (``<=128`` for a
dynamic dimension's bound, ``()`` around a tuple's parts). Both the explanation of a miss ("new shapes of
a known graph: parameter 0 dimension 1 is 77, the nearest stored variant has 64") and the bucketing report
(which dimensions vary across a graph's variants) read them through here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Dimension",
    "Shape",
    "ShapeSignature",
    "differing_dimensions",
    "nearest",
    "parse_arrays",
    "parse_shape_signature",
]

_ARRAY = re.compile(r"([A-Za-z0-9_]+)\[([^\]]*)\]")
_FLAT = re.compile(r"[^\[\]()]*(?:\[[^\[\]()]*\][^\[\]()]*)*")  # no parentheses, brackets paired, unnested
_COMMA_OUTSIDE = re.compile(r",(?![^\[]*\])")  # in such a text: a comma not inside brackets


@dataclass(frozen=True)
class Shape:
    """One array: its element type and dimensions (a dynamic dimension's bound counts as its size)."""

    element: str
    dims: tuple[int, ...]
    dynamic: tuple[bool, ...]


@dataclass(frozen=True)
class ShapeSignature:
    """A graph's parameters (a tuple parameter's arrays flattened in order) and its result's text."""

    params: tuple[Shape, ...]
    result: str


@dataclass(frozen=True)
class Dimension:
    """A dimension that differs between two signatures: parameter ``param``, dimension ``dim``."""

    param: int
    dim: int
    ours: int
    theirs: int

    def describe(self) -> str:
        return f"parameter {self.param} dimension {self.dim}: {self.ours} (nearest stored: {self.theirs})"


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and parentheses."""
    if _FLAT.fullmatch(text):  # the common case (no tuple parameter), at the speed of one regex
        parts = [part.strip() for part in _COMMA_OUTSIDE.split(text)]
        if parts and not parts[-1]:
            parts.pop()
        return parts
    parts = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


@functools.lru_cache(maxsize=4096)  # a graph's variants share most parameters: parsed once each
def _arrays(text: str) -> tuple[Shape, ...]:
    shapes = []
    for match in _ARRAY.finditer(text):
        dims: list[int] = []
        dynamic: list[bool] = []
        for raw in filter(None, (d.strip() for d in match.group(2).split(","))):
            bounded = raw.startswith("<=")
            try:
                dims.append(int(raw[2:] if bounded else raw))
            except ValueError:
                return ()
            dynamic.append(bounded)
        shapes.append(Shape(match.group(1), tuple(dims), tuple(dynamic)))
    return tuple(shapes)


def parse_arrays(text: str) -> tuple[Shape, ...]:
    """The arrays of a shape text in order (``(f32[8,128], s32[8])``: two), tuples flattened; () when a
    dimension is not a number."""
    return _arrays(text)


def parse_shape_signature(text: str | None) -> ShapeSignature | None:
    """The parameters and result of a recorded shapes text, or None when it is absent or not of that form."""
    if not text or not text.startswith("(") or ") -> " not in text:
        return None
    params_text, _, result = text[1:].rpartition(") -> ")
    params: list[Shape] = []
    for part in _split_top(params_text):
        arrays = _arrays(part)
        if not arrays:
            return None
        params.extend(arrays)
    return ShapeSignature(tuple(params), result)


def differing_dimensions(ours: ShapeSignature, theirs: ShapeSignature) -> list[Dimension] | None:
    """The dimensions where two signatures of one graph differ, or None when they differ in more than
    sizes (another number of parameters, another element type or rank): then no dimension explains it."""
    if len(ours.params) != len(theirs.params):
        return None
    found: list[Dimension] = []
    for index, (a, b) in enumerate(zip(ours.params, theirs.params, strict=True)):
        if a.element != b.element or len(a.dims) != len(b.dims):
            return None
        pairs = enumerate(zip(a.dims, b.dims, strict=True))
        found.extend(Dimension(index, dim, x, y) for dim, (x, y) in pairs if x != y)
    return found


def nearest(
    ours: ShapeSignature, candidates: Sequence[ShapeSignature]
) -> tuple[ShapeSignature, list[Dimension]] | None:
    """The candidate that differs from ``ours`` in the fewest dimensions (then the smallest total size
    difference), with those dimensions; None when no candidate is comparable."""
    best: tuple[tuple[int, int], ShapeSignature, list[Dimension]] | None = None
    for candidate in candidates:
        dims = differing_dimensions(ours, candidate)
        if dims is None:
            continue
        rank = (len(dims), sum(abs(d.ours - d.theirs) for d in dims))
        if best is None or rank < best[0]:
            best = (rank, candidate, dims)
    return None if best is None else (best[1], best[2])
