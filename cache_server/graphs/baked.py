"""Sizes baked into a graph: what differs between entries of one module at the same input shapes.

Entries whose bodies (:class:`~cache_server.parsing.instructions.Body`) have one ``structure`` are the same
graph with other sizes inside it: a step that slices, pads or builds arrays by Python integers. Their sized
ops line up position by position, so:

- :func:`size_changes` names what differs between two such entries (a miss and its nearest stored
  neighbour): each op, the attribute and the dimension, and the two values;
- :func:`internal_axes` finds, across many such entries, the sizes that vary (an "internal dimension"
  each), the values each took, and each entry's point over them, so that the bucketing report can treat
  them as it treats varying input dimensions. Sizes that move with another one on a line (a pad's width
  that is the fixed length minus a slice's limit, the broadcast after the slice) are folded into the most
  telling one; no other size is (padding the leader would leave it varying, and the compiles counted
  over the leader alone would be false).

Pure functions: no I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import cached_property

from cache_server.parsing.body import Body, SizedOp, body_from_text, short_source
from cache_server.parsing.schema import ELEMENT_BYTES

__all__ = [
    "MAX_ALIGNED_OPS",
    "MAX_AXES",
    "BakedGroup",
    "EdgeOps",
    "InternalAxis",
    "SizeChange",
    "baked_group",
    "baked_group_of",
    "describe_changes",
    "edge_ops",
    "internal_axes",
    "size_changes",
]

MAX_AXES = 64  # varying sizes considered before folding the dependent ones
SHOWN_CHANGES = 3  # changes a miss's detail names (the rest are counted)
# Which attribute of an op of one kind says most: the size the user chose (a slice's limit, a shape) before
# what follows from it (a pad's widths, a slice's start and stride)
_ATTRIBUTE_RANK = {"limit": 0, "sizes": 0, "slice_sizes": 0, "shape": 0, "value": 1}


def _number(value: float | None) -> str:
    if value is None:
        return "none"
    return str(int(value)) if math.isfinite(value) and value == int(value) else f"{value:g}"


@dataclass(frozen=True)
class SizeChange:
    """One size that differs: ``op`` (ours), its ``attribute`` (``limit``, ``high``, ``shape``, ``value``)
    at dimension ``index``, our value and the stored entry's."""

    op: SizedOp
    attribute: str
    index: int
    ours: float | None  # None: the attribute has fewer dimensions on this side
    theirs: float | None

    def describe(self) -> str:
        return (
            f"{self.op.label()} {self.attribute}[{self.index}] {_number(self.ours)} "
            f"(stored: {_number(self.theirs)})"
        )


def size_changes(ours: Body, theirs: Body) -> list[SizeChange] | None:
    """The sizes that differ between two bodies of one structure, most telling first; None when their
    structures differ (another graph under the same name: no size explains it)."""
    if ours.structure != theirs.structure:
        return None
    stored = {op.position: op for op in theirs.ops}
    changes: list[SizeChange] = []
    for op in sorted(ours.ops, key=lambda o: (o.priority, o.position)):
        other = stored.get(op.position)
        if other is None or other.opcode != op.opcode:
            continue
        for attribute in sorted(op.sizes.keys() | other.sizes.keys()):
            mine, theirs_values = op.sizes.get(attribute, []), other.sizes.get(attribute, [])
            if mine == theirs_values:
                continue
            for index in range(max(len(mine), len(theirs_values))):
                a = mine[index] if index < len(mine) else None
                b = theirs_values[index] if index < len(theirs_values) else None
                if a != b:
                    changes.append(SizeChange(op, attribute, index, a, b))
    changes.sort(key=lambda c: (c.op.priority, _ATTRIBUTE_RANK.get(c.attribute, 1), c.op.position))
    return changes


def describe_changes(changes: Sequence[SizeChange], shown: int = SHOWN_CHANGES) -> str:
    """``slice.0 (…, step.py:9) limit[0] 5 (stored: 3); pad.2 … high[0] 11 (stored: 13); and 2 more``."""
    text = "; ".join(change.describe() for change in changes[:shown])
    if len(changes) > shown:
        text += f"; and {len(changes) - shown} more"
    return text


@dataclass(frozen=True)
class InternalAxis:
    """A size inside a graph that varies across its entries at one input shape: op ``op`` at
    ``position``, its ``attribute`` at dimension ``index``; the distinct values it took (sorted), and
    ``folded``: how many other varying sizes follow from it (a pad width, the broadcast after a slice)."""

    op: SizedOp
    attribute: str
    index: int
    values: tuple[int, ...]
    folded: int = 0

    @property
    def label(self) -> str:
        """``slice.0 limit[0] (jit(step)/slice, step.py:9)``."""
        where = ", ".join(x for x in (self.op.op, short_source(self.op.source)) if x)
        base = f"{self.op.name} {self.attribute}[{self.index}]"
        return f"{base} ({where})" if where else base

    def bytes_at(self, size: int) -> int:
        """Bytes of the op's result with this dimension at ``size``: what padding the size costs."""
        unit, sized = self._unit
        # a crafted entry's dimensions must not overflow the report's arithmetic
        return min(unit * min(max(size, 0), 1 << 40) if sized else unit, 1 << 62)

    @cached_property
    def _unit(self) -> tuple[int, bool]:
        """The result's bytes but for this dimension (all of them where the size is not one of the
        result's), and whether the size is: worked out once, :meth:`bytes_at` is asked for every point."""
        element, dims = _result_dims(self.op.result)
        sized = self.index < len(dims) and self.attribute in ("limit", "shape", "sizes", "slice_sizes")
        if sized:
            del dims[self.index]
        return ELEMENT_BYTES.get(element, 4) * math.prod(min(max(d, 0), 1 << 40) for d in dims), sized


def _result_dims(result: str) -> tuple[str, list[int]]:
    element, _, rest = result.partition("[")
    try:
        return element, [int(d) for d in rest.rstrip("]").split(",") if d]
    except ValueError:
        return element, []


def internal_axes(bodies: Sequence[Body]) -> tuple[list[InternalAxis], list[tuple[int, ...]]]:
    """The varying sizes across ``bodies`` (entries of one module at one input shape) and each body's
    values over them, in ``bodies``' order. Only the bodies of the most common structure count (the others
    are left out of the points); sizes that are a function of a more telling one are folded into it."""
    if not bodies:
        return [], []
    common = Counter(b.structure for b in bodies).most_common(1)[0][0]
    same = [b for b in bodies if b.structure == common]
    by_position = [{op.position: op for op in b.ops} for b in same]
    candidates: list[tuple[SizedOp, str, int, list[int]]] = []
    telling = sorted(
        ((op, attribute, first) for op in same[0].ops for attribute, first in op.sizes.items()),
        key=lambda item: (item[0].priority, _ATTRIBUTE_RANK.get(item[1], 1), item[0].position),
    )
    for op, attribute, first in telling:
        for index in range(len(first)):
            column: list[int] = []
            for ops in by_position:
                other = ops.get(op.position)
                values = other.sizes.get(attribute, []) if other is not None else []
                if other is None or other.opcode != op.opcode or index >= len(values):
                    break
                value = values[index]
                if not math.isfinite(value) or value != int(value):  # not a size: a float literal
                    break
                column.append(int(value))
            else:
                if len(set(column)) > 1:
                    candidates.append((op, attribute, index, column))
        if len(candidates) >= MAX_AXES:
            break
    kept: list[tuple[SizedOp, str, int, list[int], int]] = []
    for op, attribute, index, column in candidates[:MAX_AXES]:
        for place, (k_op, k_attr, k_index, k_column, folded) in enumerate(kept):
            if _follows(column, k_column):
                kept[place] = (k_op, k_attr, k_index, k_column, folded + 1)
                break
        else:
            kept.append((op, attribute, index, column, 0))
    axes = [
        InternalAxis(op, attribute, index, tuple(sorted(set(column))), folded)
        for op, attribute, index, column, folded in kept
    ]
    points = [tuple(column[i] for _, _, _, column, _ in kept) for i in range(len(same))]
    return axes, points


def _follows(column: list[int], leader: list[int]) -> bool:
    """Whether ``column`` moves with ``leader``, so that padding the leader carries it along and leaves the
    compiles counted over the leader alone: entry by entry ``column = slope * leader + offset`` exactly (a
    pad's width that is a fixed length minus a slice's limit, the broadcast of the slice's length, a
    reshape of four times it). Only a line says what ``column`` becomes at a padded size: a size merely
    determined by the leader on the entries read is not folded (on a few entries whose leader values are
    all distinct every size is, and padding the leader would leave the others varying). With two leader
    values any two sizes lie on a line, so only a slope of 1 or -1 counts then."""
    at: dict[int, int] = {}
    for a, b in zip(leader, column, strict=True):
        if at.setdefault(a, b) != b:
            return False  # not even a function of the leader
    if len(at) < 2:
        return False
    low, high = min(at), max(at)
    rise, run = at[high] - at[low], high - low
    if rise == 0 or (len(at) == 2 and abs(rise) != run):
        return False
    return all((b - at[low]) * run == rise * (a - low) for a, b in at.items())


@dataclass(frozen=True)
class BakedGroup:
    """Entries of one graph at one input shape that differ only in sizes inside it: their parameters
    (``params``: the shapes text's left side), how many were read, the varying sizes and each entry's
    point over them (see :func:`internal_axes`)."""

    params: str
    entries: int
    axes: tuple[InternalAxis, ...]
    points: tuple[tuple[int, ...], ...]


def baked_group(rows: Sequence[tuple[str, str, str]]) -> BakedGroup | None:
    """The largest group of ``rows`` (shapes text, structure digest, sized ops text: entries of one
    module) with the same parameters and structure, if it has at least two entries whose sizes vary."""
    parsed = [(shapes, body_from_text(structure, "", "", ops)) for shapes, structure, ops in rows]
    return baked_group_of([(shapes, body) for shapes, body in parsed if body is not None])


def baked_group_of(bodies: Sequence[tuple[str, Body]]) -> BakedGroup | None:
    """:func:`baked_group` of bodies already parsed, each with its entry's shapes text."""
    groups: dict[tuple[str, str], list[Body]] = {}
    for shapes, body in bodies:
        groups.setdefault((shapes.rpartition(") -> ")[0], body.structure), []).append(body)
    best = max(groups.items(), key=lambda item: len(item[1]), default=None)
    if best is None or len(best[1]) < 2:
        return None
    (params, _), members = best
    axes, points = internal_axes(members)
    if not axes:
        return None
    return BakedGroup(params + ")", len(members), tuple(axes), tuple(points))


EDGE_INSTRUCTIONS = 4  # instructions an added or dropped sized op may bring with it (its operands, a reshape)
MAX_ALIGNED_OPS = 2_000  # sized ops of two bodies aligned at most (beyond: not compared)
MAX_MIDDLE_OPS = 128  # sized ops between the common ends of two bodies aligned at most (~2 ms a pair)
MAX_EDGE_SHARE = 2  # of the ops aligned, at most one in this many (and at least 2) may be added or dropped


@dataclass(frozen=True)
class EdgeOps:
    """What tells apart two bodies of one step where a size at an edge adds or drops an op (an empty
    slice left out of a concatenation, a whole one that needs no slice): their sized ops are the same
    kinds in the same order but for ``ours`` (only in our body) and ``theirs`` (only in the other)."""

    ours: tuple[SizedOp, ...]
    theirs: tuple[SizedOp, ...]

    def describe(self, shown: int = SHOWN_CHANGES) -> str:
        """``this size drops an op: slice.7 (…, step.py:9) to f32[1,1,4] is not in it; …`` (of ops of one
        kind, which one a size dropped is a guess: the result's shape says which it may be)."""
        parts = [f"{op.label()} to {op.result} is not in it" for op in self.theirs[:shown]]
        parts += [
            f"{op.label()} to {op.result} is only in it" for op in self.ours[: max(0, shown - len(parts))]
        ]
        more = len(self.ours) + len(self.theirs) - len(parts)
        what = "drops an op" if self.theirs and not self.ours else "adds or drops an op"
        return f"this size {what}: " + "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _token(op: SizedOp) -> tuple[str, str, int]:
    """What must match for two sized ops to be the same op of a step at other sizes: the opcode, the
    element type and rank of the result."""
    element, dims = _result_dims(op.result)
    return op.opcode, element, len(dims)


def edge_ops(ours: Body, theirs: Body) -> EdgeOps | None:
    """Whether ``ours`` is ``theirs`` with a few sized ops added or dropped, as a size at an edge does (an
    empty slice is no op, a whole one none either), the other sized ops the same kinds in the same order:
    the ops that differ, or None (another computation; bodies of one structure, truncated ones, or more
    than :data:`MAX_ALIGNED_OPS` ops in all). At most one op in :data:`MAX_EDGE_SHARE` of those aligned
    (and at least two) may differ, and the instruction counts by no more than a few per such op: the
    rest of the graph is what the sized ops leave to the structure digest, which is not compared here."""
    if ours.structure == theirs.structure or ours.truncated or theirs.truncated:
        return None
    if len(ours.ops) + len(theirs.ops) > MAX_ALIGNED_OPS or not ours.ops or not theirs.ops:
        return None
    a, b = [_token(op) for op in ours.ops], [_token(op) for op in theirs.ops]
    head = 0  # the common ends are matched as they are (linear); only what lies between is aligned
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    middle_a, middle_b = a[head : len(a) - tail], b[head : len(b) - tail]
    if max(len(middle_a), len(middle_b)) > MAX_MIDDLE_OPS:
        return None  # aligning them would cost up to the square of their length
    only_ours: list[SizedOp] = []
    only_theirs: list[SizedOp] = []
    matcher = SequenceMatcher(None, middle_a, middle_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            only_ours.extend(ours.ops[head + i1 : head + i2])
            only_theirs.extend(theirs.ops[head + j1 : head + j2])
    differ = len(only_ours) + len(only_theirs)
    aligned = len(ours.ops) - len(only_ours)
    if differ == 0 or aligned < 1 or differ > max(2, aligned // MAX_EDGE_SHARE):
        return None
    if abs(ours.instructions - theirs.instructions) > EDGE_INSTRUCTIONS * differ:
        return None
    return EdgeOps(tuple(only_ours), tuple(only_theirs))
