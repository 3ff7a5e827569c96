"""A graph's body as the index keeps it: the digests of its structure, program and whole module, and its
sized ops (the instructions that bring a size of their own), with the text form ``entry_graphs.ops`` holds.
:mod:`~cache_server.parsing.instructions` reads it from a module; :mod:`~cache_server.graphs.baked` compares
bodies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_OPS_TEXT", "ROW", "SIZED_OPCODES", "Body", "SizedOp", "body_from_text", "short_source"]

MAX_OPS_TEXT = 64 * 1024  # characters of an entry's sized ops kept in the index (a real module's: a few KB)

# Opcodes that carry sizes of their own, most telling first: what a miss names first, what is kept first.
# "shape" is the result's dimensions where the op makes them up (iota, broadcast, reshape, ...).
SIZED_OPCODES: dict[str, int] = {
    "slice": 0,
    "pad": 0,
    "dynamic-slice": 0,
    "gather": 0,
    "iota": 0,
    "constant": 1,
    "rng": 1,
    "rng-bit-generator": 1,
    "broadcast": 2,
    "dynamic-reshape": 2,
    "reshape": 3,
}


ROW = ("position", "opcode", "name", "sizes", "result", "op", "source")
"""The order of a sized op's fields in the index's rows (:meth:`SizedOp.row`, :meth:`SizedOp.from_row`):
kept in stored rows, so a field is only ever added at the end."""


@dataclass(frozen=True)
class SizedOp:
    """An instruction with sizes of its own: where it is (``position``: its place among the module's
    instructions, computations in order), what it is, its sizes by attribute (``limit``, ``high``,
    ``shape``, ``value``, ...), its result (``f32[5,8]``) and, from its metadata, its op and source."""

    position: int
    opcode: str
    name: str
    sizes: dict[str, list[float]]
    result: str
    op: str | None = None
    source: str | None = None

    @property
    def priority(self) -> int:
        return SIZED_OPCODES.get(self.opcode, 9)

    def row(self) -> list[object]:
        """The op as ``entry_graphs.ops`` keeps it: its fields in :data:`ROW` order (a JSON array, so a
        module of a thousand ops does not repeat a thousand times each field's name)."""
        return [getattr(self, name) for name in ROW]

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> SizedOp:
        """An op from :meth:`row`'s array; KeyError, ValueError or TypeError when it is not one."""
        if len(row) < len(ROW):
            raise KeyError(ROW[len(row)])
        # unpacked in ROW's order (a later field past ROW is passed over): a report parses thousands
        position, opcode, name, sizes, result, op, source = row[: len(ROW)]
        return cls(
            int(position),
            str(opcode),
            str(name),
            {str(k): [float(v) for v in vs] for k, vs in dict(sizes).items()},
            str(result),
            None if op is None else str(op),
            None if source is None else str(source),
        )

    def label(self) -> str:
        """``slice.5 (jit(step)/slice, train/step.py:9)``: how a report names the op (the source's last
        two path parts)."""
        where = ", ".join(x for x in (self.op, short_source(self.source)) if x)
        return f"{self.name} ({where})" if where else self.name


def short_source(source: str | None) -> str | None:
    """``train/step.py:9`` for ``/home/me/project/train/step.py:9``."""
    if not source:
        return source
    return "/".join(source.replace("\\", "/").split("/")[-2:])


@dataclass(frozen=True)
class Body:
    """A module's instructions, digested (see the module docstring)."""

    structure: str
    program: str
    whole: str
    instructions: int
    ops: tuple[SizedOp, ...]
    truncated: bool = False  # more sized ops than MAX_OPS: the least telling were left out
    # the file:line most instructions were traced at, where the metadata names files (torch_xla with
    # XLA_HLO_DEBUG); not kept in the index (entry_graphs.source has it)
    source: str | None = field(default=None, compare=False)

    def ops_text(self, limit: int = MAX_OPS_TEXT) -> str:
        """The ops as the index keeps them: compact JSON (:func:`body_from_text` reads it back), at most
        about ``limit`` characters: past that the least telling ops are left out (and ``truncated`` set),
        so a crafted entry cannot make its index row much larger than a real one's."""
        kept: list[tuple[int, list[object]]] = []
        size = 0
        for op in sorted(self.ops, key=lambda o: (o.priority, o.position)):
            row = op.row()
            size += len(json.dumps(row, separators=(",", ":"))) + 1
            if size > limit:
                break
            kept.append((op.position, row))
        rows = [row for _, row in sorted(kept, key=lambda item: item[0])]
        truncated = self.truncated or len(rows) < len(self.ops)
        return json.dumps({"n": self.instructions, "t": truncated, "ops": rows}, separators=(",", ":"))


def body_from_text(structure: str, program: str, whole: str, ops_text: str) -> Body | None:
    """A body as the index keeps it; None when the text is not of that form."""
    try:
        data = json.loads(ops_text)
        ops = tuple(SizedOp.from_row(row) for row in data["ops"])
        return Body(structure, program, whole, int(data["n"]), ops, bool(data["t"]))
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
