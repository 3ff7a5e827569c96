"""What an HLO module computes, beyond its parameter shapes: three digests, the sizes baked into it, and
where it was traced.

A job that slices or pads by Python integers traces one graph per size at the same input shapes: the
sizes are constants inside the HLO (slice limits, pad widths, iota lengths, broadcast shapes, literals).
Two entries of one module with the same parameter shapes then differ only there. To find such entries
and name what differs, :func:`read_body` walks every instruction of the module once and returns:

- ``structure``: a digest of the graph with its sizes left out (opcodes, element types, ranks, operands,
  every attribute but the sizes below). Entries with the same structure are the same graph at other sizes.
- ``whole``: a digest of the module's computations as they are, metadata included.
- ``program``: a digest of the whole computation but its metadata (op names, source lines, which
  ``XLA_HLO_DEBUG`` and JAX's stack frames add) and instruction names. Two keys with the same program
  differ only in metadata or in options outside the module.
- ``ops``: the instructions that bring a size of their own (:data:`SIZED_OPCODES`), in module order, each
  with those sizes, its result's shape, the op name and source line from its metadata. Comparing the ops
  of two entries of one structure position by position names the sizes that differ.
- ``source``: the ``file:line`` most instructions were traced at, where the metadata names files.

Bounded: the instructions are counted before any is walked (a scan of the computations' fields that reads
none of them), and a module of more than :data:`MAX_INSTRUCTIONS` is not walked at all (no body); the counting
and the walking of one entry's modules share a :class:`Budget` (a crafted TPU entry holds many candidate
modules: past the budget the next one is refused unread). At most :data:`MAX_OPS` ops and :data:`MAX_VALUES`
numbers per attribute are kept, a literal's values only when it has at most :data:`MAX_LITERAL_VALUES`;
names, op names and source files are cut at :data:`MAX_LABEL` characters as they are read (the count of
source lines keys on the cut text: a MiB-long file name is never held whole); nothing recurses.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections import Counter
from collections.abc import Iterator

from cache_server.parsing.body import SIZED_OPCODES, Body, SizedOp
from cache_server.parsing.schema import (
    COMPUTATION,
    ELEMENT_TYPES,
    FRAME,
    INSTRUCTION,
    LITERAL_FIXED,
    LITERAL_VARINT,
    LOCATION,
    METADATA,
    PADDING_DIMENSION,
    SHAPE,
    SLICE_DIMENSION,
    STACK_FRAMES,
    TUPLE,
)
from cache_server.parsing.wire import Buffer, WireError, ints, iter_fields, read, text

__all__ = ["MAX_ENTRY_FIELDS", "MAX_INSTRUCTIONS", "MAX_OPS", "Budget", "read_body"]

MAX_INSTRUCTIONS = 250_000  # a module with more has no body (counted, not walked; misses stay different_key)
MAX_OPS = 1_000  # sized ops kept per module (the most telling kinds first)
MAX_VALUES = 64  # numbers kept per attribute
MAX_LITERAL_VALUES = 16  # a constant's values are kept when it has at most this many
MAX_LABEL = 160  # characters of an op name or source kept
MAX_FRAMES = 100_000  # stack frames, locations and file names read of a module's stack-frame index
MAX_ENTRY_FIELDS = 2 * MAX_INSTRUCTIONS  # computation fields counted in all of one entry's modules
MAX_SOURCE = 512  # characters of the file:line a module was traced at (as the index keeps it)


class Budget:
    """What one entry's modules may still cost: computation fields to count (:data:`MAX_ENTRY_FIELDS`) and
    instructions to walk (:data:`MAX_INSTRUCTIONS`), shared by its candidate modules, each charged what it
    took. A module past what is left is refused (:class:`~cache_server.parsing.wire.WireError`)."""

    def __init__(self, fields: int = MAX_ENTRY_FIELDS, instructions: int = MAX_INSTRUCTIONS) -> None:
        self.fields = fields
        self.instructions = instructions


_SHAPE_IS_ATTRIBUTE = {"iota", "rng", "rng-bit-generator", "broadcast", "dynamic-reshape", "reshape"}

_F = INSTRUCTION
# the fields that carry an instruction's own sizes (read as sized ops, left out of the structure digest)
_SIZE_FIELDS = frozenset(
    _F[name]
    for name in ("literal", "slice_dimensions", "dynamic_slice_sizes", "padding_config", "gather_slice_sizes")
)
# left out of the structure digest: the sizes (and what carries them), names and metadata
_NOT_STRUCTURE = _SIZE_FIELDS | {
    _F[name]
    for name in ("name", "shape", "metadata", "frontend_attributes", "statistics_viz", "original_value")
}
# left out of the program digest: names and metadata only
_NOT_PROGRAM = frozenset(
    {_F["name"], _F["metadata"], _F["frontend_attributes"], _F["statistics_viz"], _F["original_value"]}
)


def _fields(buf: Buffer, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """``(number, wire, value, field start, field end)`` for each field of the message."""
    previous = start
    for number, wire, value, stop in iter_fields(buf, start, end):
        yield number, wire, value, previous, stop
        previous = stop


def _numbers(values: list[int]) -> list[float]:
    """Signed (two's complement int64), at most MAX_VALUES of them."""
    return [float(v - (1 << 64) if v >= 1 << 63 else v) for v in values[:MAX_VALUES]]


_SHAPE_ELEMENT, _SHAPE_DIMS, _SHAPE_TUPLE = SHAPE["element_type"], SHAPE["dimensions"], SHAPE["tuple_shapes"]


def _dims_of(buf: Buffer, start: int, end: int) -> tuple[int, list[int], int]:
    """A shape's element type, its dimensions (no tuple parts: a tuple has none) and how many tuple parts."""
    element = parts = 0
    dims: list[tuple[int, int, int]] = []
    for number, wire, value, stop in iter_fields(buf, start, end):
        if number == _SHAPE_ELEMENT and wire == 0:
            element = value
        elif number == _SHAPE_DIMS and len(dims) < MAX_VALUES:
            dims.append((wire, value, stop))
        elif number == _SHAPE_TUPLE:
            parts += 1
    return element, [d - (1 << 64) if d >= 1 << 63 else d for d in ints(buf, dims, MAX_VALUES)], parts


def _shape_text(element: int, dims: list[int], parts: int) -> str:
    if element == TUPLE:
        return f"tuple[{parts}]"
    return f"{ELEMENT_TYPES.get(element, f'type{element}')}[{','.join(map(str, dims))}]"


def _literal_values(buf: Buffer, start: int, end: int) -> list[float] | None:
    """A literal's values when it is small and numeric; None otherwise."""
    for number, wire, value, _, stop in _fields(buf, start, end):
        if wire != 2:
            continue
        if number in LITERAL_VARINT.values():
            found = ints(buf, [(wire, value, stop)], MAX_LITERAL_VALUES + 1)
            return _numbers(found) if len(found) <= MAX_LITERAL_VALUES else None
        for fixed_number, fmt, size in LITERAL_FIXED.values():
            if number == fixed_number:
                count = (stop - value) // size
                if count > MAX_LITERAL_VALUES or (stop - value) % size:
                    return None
                floats = [float(x) for x in struct.unpack_from(f"<{count}{fmt[1]}", buf, value)]
                # -inf masks and NaN are no size (and NaN equals nothing): such a literal is not kept
                return floats if all(math.isfinite(x) for x in floats) else None
    return None


class _Frames:
    """A module's stack-frame index: ``stack_frame_id`` -> ``file:line`` (JAX's metadata points there)."""

    def __init__(self, buf: Buffer, span: tuple[int, int] | None) -> None:
        self._buf = buf
        self._files: list[str] = []
        self._locations: list[tuple[int, int]] = []
        self._frames: list[int] = []
        if span is None:
            return
        found = read(buf, span[0], span[1], STACK_FRAMES, limit=MAX_FRAMES)
        self._files = [text(buf, [(w, s, e)], MAX_LABEL) or "" for w, s, e in found["file_names"] if w == 2]
        for wire, s, e in found["file_locations"]:
            if wire == 2:
                loc = read(buf, s, e, LOCATION, limit=1)
                file_ids = ints(buf, loc["file_name_id"], 1)
                lines = ints(buf, loc["line"], 1)
                self._locations.append((file_ids[-1] if file_ids else 0, lines[-1] if lines else 0))
        for wire, s, e in found["stack_frames"]:
            if wire == 2:
                ids = ints(buf, read(buf, s, e, FRAME, limit=1)["file_location_id"], 1)
                self._frames.append(ids[-1] if ids else 0)

    def source(self, frame_id: int) -> str | None:
        """The innermost ``file:line`` of a frame (ids count from 1)."""
        if not 0 < frame_id <= len(self._frames):
            return None
        location = self._frames[frame_id - 1]
        if not 0 < location <= len(self._locations):
            return None
        file_id, line = self._locations[location - 1]
        if not 0 < file_id <= len(self._files):
            return None
        return f"{self._files[file_id - 1]}:{line}"[:MAX_LABEL]


# Ops whose source line says where data came from, not where the graph was built.
_NOT_A_SOURCE = {"xla__device_data", "parameter", "constant"}
_LONGEST_NOT_A_SOURCE = max(map(len, _NOT_A_SOURCE)) + 1  # (one more: a longer op type is none of them)
_OP_TYPE, _SOURCE_FILE, _SOURCE_LINE = METADATA["op_type"], METADATA["source_file"], METADATA["source_line"]


def _traced_at(buf: Buffer, start: int, end: int) -> str | None:
    """``file:line`` of an instruction's metadata when it names a file and its op builds the graph."""
    op_type = source_file = None
    line: int | None = None
    for number, wire, value, stop in iter_fields(buf, start, end):
        if wire == 2 and number == _OP_TYPE:
            op_type = (value, stop)
        elif wire == 2 and number == _SOURCE_FILE:
            source_file = (value, stop)
        elif wire == 0 and number == _SOURCE_LINE:
            line = value
    if source_file is None or source_file[0] == source_file[1]:
        return None
    if op_type is not None and text(buf, [(2, *op_type)], _LONGEST_NOT_A_SOURCE) in _NOT_A_SOURCE:
        return None
    name = text(buf, [(2, *source_file)]) or ""  # cut (wire.MAX_TEXT) before it is kept and counted
    return f"{name}:{line}" if line is not None else name


def _metadata(buf: Buffer, start: int, end: int, frames: _Frames) -> tuple[str | None, str | None]:
    meta = read(buf, start, end, METADATA, limit=1)
    op = text(buf, meta["op_name"], MAX_LABEL) or text(buf, meta["op_type"], MAX_LABEL)
    source_file = text(buf, meta["source_file"], MAX_LABEL)
    if source_file:
        lines = ints(buf, meta["source_line"], 1)
        source: str | None = f"{source_file}:{lines[-1]}" if lines else source_file
    else:
        frame_ids = ints(buf, meta["stack_frame_id"], 1)
        source = frames.source(frame_ids[-1]) if frame_ids else None
    return (op[:MAX_LABEL] if op else None), (source[:MAX_LABEL] if source else None)


def _sizes(buf: Buffer, opcode: str, fields: dict[int, list[tuple[int, int, int]]]) -> dict[str, list[float]]:
    """The sizes an instruction of a sized opcode carries, by attribute."""
    sizes: dict[str, list[float]] = {}
    if opcode == "slice":
        starts: list[int] = []
        limits: list[int] = []
        strides: list[int] = []
        for wire, s, e in fields.get(_F["slice_dimensions"], []):
            if wire == 2:
                dim = read(buf, s, e, SLICE_DIMENSION, limit=1)
                starts.append((ints(buf, dim["start"], 1) or [0])[-1])
                limits.append((ints(buf, dim["limit"], 1) or [0])[-1])
                strides.append((ints(buf, dim["stride"], 1) or [1])[-1])
        sizes = {"start": _numbers(starts), "limit": _numbers(limits), "stride": _numbers(strides)}
    elif opcode == "pad":
        low: list[int] = []
        high: list[int] = []
        interior: list[int] = []
        for wire, s, e in fields.get(_F["padding_config"], []):
            if wire != 2:
                continue
            for d_wire, ds, de in read(buf, s, e, {"dimensions": 1}, limit=MAX_VALUES)["dimensions"]:
                if d_wire == 2:
                    dim = read(buf, ds, de, PADDING_DIMENSION, limit=1)
                    low.append((ints(buf, dim["low"], 1) or [0])[-1])
                    high.append((ints(buf, dim["high"], 1) or [0])[-1])
                    interior.append((ints(buf, dim["interior"], 1) or [0])[-1])
        sizes = {"low": _numbers(low), "high": _numbers(high), "interior": _numbers(interior)}
    elif opcode == "dynamic-slice":
        sizes = {"sizes": _numbers(ints(buf, fields.get(_F["dynamic_slice_sizes"], []), MAX_VALUES))}
    elif opcode == "gather":
        sizes = {"slice_sizes": _numbers(ints(buf, fields.get(_F["gather_slice_sizes"], []), MAX_VALUES))}
    elif opcode == "constant":
        literal = fields.get(_F["literal"])
        if literal and literal[-1][0] == 2:
            values = _literal_values(buf, literal[-1][1], literal[-1][2])
            if values is not None:
                sizes = {"value": values}
    return sizes


def _count(view: memoryview, computations: list[tuple[int, int, int]], budget: Budget) -> int | None:
    """How many instructions the computations hold, from a scan of their fields that reads no instruction
    (charged to ``budget``); None past :data:`MAX_INSTRUCTIONS`. Raises
    :class:`~cache_server.parsing.wire.WireError` at the first malformed field, or once the entry's budget is
    spent."""
    count = scanned = 0
    try:
        for c_wire, c_start, c_end in computations:
            if c_wire != 2:
                continue
            for number, wire, _, _ in iter_fields(view, c_start, c_end):
                scanned += 1
                if scanned > budget.fields:
                    raise WireError(f"more than {MAX_ENTRY_FIELDS} computation fields in the entry's modules")
                if number == _INSTRUCTIONS and wire == 2:
                    count += 1
                    if count > budget.instructions:
                        if budget.instructions < MAX_INSTRUCTIONS:  # other modules of the entry were walked
                            raise WireError(f"more than {MAX_INSTRUCTIONS} instructions in the modules")
                        return None  # too large to walk: no body
    finally:
        budget.fields -= min(scanned, budget.fields)
    budget.instructions -= count
    return count


def read_body(
    buf: Buffer, computations: list[tuple[int, int, int]], frames: tuple[int, int] | None, budget: Budget
) -> Body | None:
    """The body of a module whose computations are at these spans of ``buf`` (``frames``: its stack-frame
    index, if any), its counting and walking charged to ``budget``. None past :data:`MAX_INSTRUCTIONS`
    (counted first: nothing is walked then). Raises :class:`~cache_server.parsing.wire.WireError` on
    malformed bytes, or past the entry's budget."""
    view = memoryview(buf)
    if _count(view, computations, budget) is None:
        return None
    structure = hashlib.blake2b(digest_size=16)
    program = hashlib.blake2b(digest_size=16)
    whole = hashlib.blake2b(digest_size=16)
    frame_index = _Frames(view, frames)
    ops: list[SizedOp] = []
    places: Counter[str] = Counter()
    position = 0
    dropped = False
    for c_wire, c_start, c_end in computations:
        if c_wire != 2:
            continue
        whole.update(view[c_start:c_end])
        for number, wire, value, f_start, f_end in _fields(view, c_start, c_end):
            if number != _INSTRUCTIONS or wire != 2:
                program.update(view[f_start:f_end])  # the computation's name, shape, ids
                continue
            op = _instruction(view, value, f_end, position, (structure, program), frame_index, places)
            if op is not None:
                ops.append(op)
                if len(ops) >= 2 * MAX_OPS:  # memory bounded: keep the most telling so far
                    ops.sort(key=lambda o: (o.priority, o.position))
                    del ops[MAX_OPS:]
                    dropped = True
            position += 1
        structure.update(b"\x00computation")
        program.update(b"\x00computation")
    ops.sort(key=lambda o: (o.priority, o.position))
    kept = sorted(ops[:MAX_OPS], key=lambda o: o.position)
    return Body(
        structure.hexdigest(),
        program.hexdigest(),
        whole.hexdigest(),
        position,
        tuple(kept),
        dropped or len(ops) > MAX_OPS,
        places.most_common(1)[0][0][:MAX_SOURCE] if places else None,
    )


def _instruction(
    view: memoryview,
    start: int,
    end: int,
    position: int,
    digests: tuple[hashlib.blake2b, hashlib.blake2b],
    frames: _Frames,
    places: Counter[str],
) -> SizedOp | None:
    """Feed one instruction to the digests (structure, program) and count where it was traced; its
    :class:`SizedOp` if its opcode carries sizes."""
    structure, program = digests
    wanted: dict[int, list[tuple[int, int, int]]] = {}
    for number, wire, value, f_start, f_end in _fields(view, start, end):
        if number not in _NOT_PROGRAM:
            program.update(view[f_start:f_end])
        if number not in _NOT_STRUCTURE:
            structure.update(view[f_start:f_end])
        if number in _WANTED:
            occurrences = wanted.setdefault(number, [])
            if len(occurrences) < MAX_VALUES:
                occurrences.append((wire, value, f_end))
            else:  # a repeated field past the bound: keep the last (a singular field's value)
                occurrences[-1] = (wire, value, f_end)
    shape = wanted.get(_F["shape"])
    element, dims, parts = (
        _dims_of(view, shape[-1][1], shape[-1][2]) if shape and shape[-1][0] == 2 else (0, [], 0)
    )
    structure.update(b"|%d,%d,%d|" % (element, len(dims), parts))
    meta = wanted.get(_F["metadata"])
    if meta and meta[-1][0] == 2:
        place = _traced_at(view, meta[-1][1], meta[-1][2])
        if place is not None:
            places[place] += 1
    opcode = text(view, wanted.get(_F["opcode"], []), MAX_LABEL) or ""
    if opcode not in SIZED_OPCODES:
        return None
    sizes = _sizes(view, opcode, wanted)
    if opcode in _SHAPE_IS_ATTRIBUTE or opcode == "constant":
        sizes["shape"] = [float(d) for d in dims]
    op, source = (
        _metadata(view, meta[-1][1], meta[-1][2], frames) if meta and meta[-1][0] == 2 else (None, None)
    )
    name = text(view, wanted.get(_F["name"], []), MAX_LABEL) or f"{opcode}.{position}"
    return SizedOp(position, opcode, name, sizes, _shape_text(element, dims, parts), op, source)


_INSTRUCTIONS = COMPUTATION["instructions"]
_WANTED = _SIZE_FIELDS | {_F[name] for name in ("name", "opcode", "shape", "metadata")}
