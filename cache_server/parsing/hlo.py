"""What a cache entry holds: the HLO module name, its parameter and result shapes, where it was traced.

CPU and GPU entries written by torch_xla are a serialized ``xla.ExecutableAndOptionsProto``. Its field 1
(``serialized_executable``) is the backend's compilation result, whose field 1 is an
``HloModuleProtoWithConfig`` whose field 1 is the ``HloModuleProto``. That module is read here with a small
protobuf wire-format reader, so the server needs no XLA schema. JAX entries are compressed (zlib, or
zstandard where JAX finds it installed): a 4-byte compile time, a length-prefixed IFRT header, then the
same ``ExecutableAndOptionsProto``; they are decompressed as far as the module reaches. TPU executables
(libtpu's serialization: a sequence of length-delimited messages) are read by :mod:`.tpu`, their
pre-optimization global module; anything else that has none of these layouts parses to ``None``.

Only the bytes up to the end of the HLO module are read; the object code after it never is. Bounded
everywhere: at most :data:`MAX_MODULE_BYTES` read or inflated, tuples nested :data:`MAX_TUPLE_DEPTH` deep,
:data:`MAX_SHAPE_FIELDS` and :data:`MAX_COMPUTATIONS` occurrences counted before they are kept (more: the
entry is unparseable), the shapes text cut at :data:`MAX_SHAPES_TEXT` characters with :data:`CUT_MARKER`,
names cut at :data:`~cache_server.parsing.wire.MAX_TEXT` as they are read. The instructions of all the
candidate modules of one entry (a TPU executable may hold many) share one
:class:`~cache_server.parsing.instructions.Budget`: a crafted entry of many refused candidates costs about
what one module at the bound does.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cache_server.parsing.body import Body
from cache_server.parsing.instructions import Budget, read_body
from cache_server.parsing.schema import COMPUTATION, ELEMENT_TYPES, MODULE, SHAPE, TUPLE
from cache_server.parsing.tpu import tpu_module_spans
from cache_server.parsing.wire import Buffer, Prefix, WireError, iter_fields, same_bytes
from cache_server.parsing.wire import ints as _ints
from cache_server.parsing.wire import read as _read
from cache_server.parsing.wire import text as _text
from cache_server.streams import NotZstd, zstd_decompressed

__all__ = [
    "MAX_MODULE_BYTES",
    "GraphInfo",
    "ParsedEntry",
    "WireError",
    "iter_fields",
    "jax_executable",
    "parse_entry",
    "read_entry",
]

MAX_MODULE_BYTES = 256 * 1024 * 1024  # an HLO module larger than this is not worth the memory to list
_MODULE_PATH = (1, 1, 1)  # ExecutableAndOptionsProto.serialized_executable -> .hlo_module -> .hlo_module

# The fields read from each message (anything else is skipped unread).
_MODULE = MODULE
_COMPUTATION = COMPUTATION
_PROGRAM_SHAPE = {"parameters": 1, "result": 2}
_SHAPE = SHAPE


@dataclass(frozen=True)
class GraphInfo:
    """One compiled graph: its module name, its shapes as text, a digest of them, and where it was traced.

    ``source`` (``file:line``) is only known when the job ran with ``XLA_HLO_DEBUG=1``. ``body`` is what the
    module computes beyond its shapes (:mod:`~cache_server.parsing.instructions`); None when it has more
    instructions than are walked.
    """

    module: str
    shapes: str
    signature: str
    source: str | None
    body: Body | None = None


MAX_TUPLE_DEPTH = 32  # tuples nested deeper than this are no XLA program's (a crafted entry's: unparsed)
MAX_SHAPE_FIELDS = 10_000  # parameters, tuple elements, dimensions of one shape: more is unparseable
MAX_COMPUTATIONS = 100_000  # computations of a module: more is unparseable
MAX_SHAPES_TEXT = 16 * 1024  # characters of an entry's shapes text; past that it is cut, with CUT_MARKER
CUT_MARKER = "…(cut)"


class _Cut(Exception):
    """The shapes text reached :data:`MAX_SHAPES_TEXT`."""


def _shape(buf: Buffer, start: int, end: int, budget: list[int], depth: int = 0) -> str:
    if depth > MAX_TUPLE_DEPTH:
        raise WireError(f"tuple shapes nested deeper than {MAX_TUPLE_DEPTH}")
    fields = _read(buf, start, end, _SHAPE, MAX_SHAPE_FIELDS, strict=True)
    types = _ints(buf, fields["element_type"], MAX_SHAPE_FIELDS, strict=True)
    element = types[-1] if types else 0
    if element == TUPLE:
        parts = [_shape(buf, s, e, budget, depth + 1) for wire, s, e in fields["tuple_shapes"] if wire == 2]
        return "(" + ", ".join(parts) + ")"
    name = ELEMENT_TYPES.get(element, f"type{element}")
    numbers = _ints(buf, fields["dimensions"], MAX_SHAPE_FIELDS, strict=True)
    dims = [d - (1 << 64) if d >= 1 << 63 else d for d in numbers]
    dynamic = _ints(buf, fields["is_dynamic_dimension"], MAX_SHAPE_FIELDS, strict=True)
    shown = [f"<={d}" if i < len(dynamic) and dynamic[i] else str(d) for i, d in enumerate(dims)]
    text = f"{name}[{','.join(shown)}]"
    budget[0] -= len(text) + 2
    if budget[0] < 0:
        raise _Cut
    return text


def _program_shape(buf: Buffer, start: int, end: int) -> tuple[str, bool]:
    """The shapes text, and whether it was cut at :data:`MAX_SHAPES_TEXT` (ending with :data:`CUT_MARKER`)."""
    fields = _read(buf, start, end, _PROGRAM_SHAPE, MAX_SHAPE_FIELDS, strict=True)
    budget = [MAX_SHAPES_TEXT]
    params: list[str] = []
    result = "()"
    try:
        for wire, s, e in fields["parameters"]:
            if wire == 2:
                params.append(_shape(buf, s, e, budget))
        results = [(s, e) for wire, s, e in fields["result"] if wire == 2]
        if results:
            result = _shape(buf, *results[-1], budget)
    except _Cut:
        return f"({', '.join(params)}, {CUT_MARKER}", True
    return f"({', '.join(params)}) -> {result}", False


def _module_info(buf: Buffer, start: int, end: int, budget: Budget) -> GraphInfo | None:
    fields = _read(buf, start, end, _MODULE, MAX_COMPUTATIONS, strict=True)
    name = _text(buf, fields["name"])
    if not name:
        return None
    shapes = None
    span = (0, 0)
    if fields["host_program_shape"] and fields["host_program_shape"][-1][0] == 2:
        _, s, e = fields["host_program_shape"][-1]
        shapes, span = _program_shape(buf, s, e), (s, e)
    else:  # older modules: the entry computation's own program shape
        entry_name = fields["entry_computation_name"]
        for wire, c_start, c_end in fields["computations"]:
            comp = _read(buf, c_start, c_end, _COMPUTATION, 1) if wire == 2 else None  # (the last: singular)
            if comp and same_bytes(buf, comp["name"], entry_name) and comp["program_shape"]:
                _, s, e = comp["program_shape"][-1]
                shapes, span = _program_shape(buf, s, e), (s, e)
    if shapes is None:
        return None
    text, cut = shapes
    # a cut text is told apart by the program shape's bytes, which it no longer shows all of
    signed = text + "\0" + hashlib.sha256(buf[span[0] : span[1]]).hexdigest() if cut else text
    body = read_body(buf, fields["computations"], _span(fields["stack_frame_index"]), budget)
    return GraphInfo(
        module=name,
        shapes=text,
        signature=hashlib.sha256(signed.encode()).hexdigest(),
        source=body.source if body is not None else None,  # read in the same walk
        body=body,
    )


def _span(field: list[tuple[int, int, int]]) -> tuple[int, int] | None:
    return (field[-1][1], field[-1][2]) if field and field[-1][0] == 2 else None


# -- reading only what is needed ------------------------------------------------------------------------
def _locate_module(prefix: Prefix) -> tuple[int, int] | None:
    """Follow field 1 three levels down, skipping other fields by their lengths without reading them."""
    start, end = 0, sys.maxsize  # the blob's length is not known before the end
    for wanted in _MODULE_PATH:
        pos = start
        while True:
            if pos >= end or not prefix.ensure(pos + 1):
                return None
            tag, pos = prefix.varint(pos)
            number, wire = tag >> 3, tag & 7
            if number == 0:  # no message has a field 0 (zeroed bytes would be walked two at a time)
                return None
            if wire == 0:
                _, pos = prefix.varint(pos)
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            elif wire == 2:
                length, pos = prefix.varint(pos)
                if pos + length > end:
                    return None
                if number == wanted:
                    start, end = pos, pos + length
                    break
                pos += length
            else:
                return None
    return start, end


_JAX_TIME_BYTES = 4
_JAX_HEADER_LIMIT = 64 * 1024  # the IFRT header is about a hundred bytes


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _is_zstd(head: bytes) -> bool:
    return head[:4] == _ZSTD_MAGIC


def _zstd_inflated(first: bytes, rest: Iterator[bytes], limit: int) -> Iterator[bytes]:
    """The decompressed bytes of a zstd stream, a MiB at a time, only as asked for (up to ``limit``).

    A frame whose window is over :data:`~cache_server.streams.ZSTD_MAX_WINDOW` is not one JAX wrote (its
    level-3 frames need 2 MiB at most): it is not parsed, rather than let an entry make the parser hold
    libzstd's own limit, 128 MiB."""
    produced = 0
    try:
        for piece in zstd_decompressed(itertools.chain([first], rest)):
            produced += len(piece)
            yield piece
            if produced >= limit:
                return
    except NotZstd as exc:
        raise WireError(str(exc)) from None


def _is_zlib(head: bytes) -> bool:
    """Whether ``head`` starts a zlib stream (deflate, a valid header checksum)."""
    return len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0


def _inflated(first: bytes, rest: Iterator[bytes], limit: int) -> Iterator[bytes]:
    """The decompressed bytes of a zlib stream, produced only as they are asked for (at most ``limit``)."""
    inflater = zlib.decompressobj()
    produced = 0
    for chunk in itertools.chain([first], rest):
        pending = chunk
        while pending and produced < limit:
            out = inflater.decompress(pending, 1024 * 1024)
            pending = inflater.unconsumed_tail
            produced += len(out)
            if out:
                yield out
        if produced >= limit or inflater.eof:
            return


def jax_executable(chunks: Iterable[bytes], *, limit: int = MAX_MODULE_BYTES) -> Iterator[bytes] | None:
    """The ``ExecutableAndOptionsProto`` inside a JAX entry, decompressed lazily; None if it is not one."""
    source = iter(chunks)
    first = next(source, b"")
    if _is_zlib(first[:2]):
        prefix = Prefix(_inflated(first, source, limit), limit)
    elif _is_zstd(first):
        prefix = Prefix(_zstd_inflated(first, source, limit), limit)
    else:
        return None
    try:
        if not prefix.ensure(_JAX_TIME_BYTES + 1):
            return None
        length, start = prefix.varint(_JAX_TIME_BYTES)
    except (WireError, zlib.error):
        return None
    if length > _JAX_HEADER_LIMIT or not prefix.ensure(start + length):
        return None
    return itertools.chain([bytes(prefix.buf[start + length :])], prefix.rest())


@dataclass(frozen=True)
class ParsedEntry:
    """What reading one entry found: its graph, or None and ``why`` there is none (a bound the entry broke,
    bytes that are no executable this parser reads)."""

    info: GraphInfo | None
    why: str | None = None


NO_MODULE = "no HLO module where torch_xla, JAX or libtpu keep one"


def parse_entry(chunks: Iterable[bytes], *, limit: int = MAX_MODULE_BYTES) -> GraphInfo | None:
    """The graph an entry holds, or ``None`` when its bytes are not a CPU/GPU torch_xla or JAX executable.

    Reads ``chunks`` only as far as the end of the HLO module (at most ``limit`` bytes, decompressed).
    """
    return read_entry(chunks, limit=limit).info


def read_entry(chunks: Iterable[bytes], *, limit: int = MAX_MODULE_BYTES) -> ParsedEntry:
    """:func:`parse_entry`, and why there is no graph when there is none."""
    source = iter(chunks)
    first = next(source, b"")
    if _is_zlib(first[:2]) or _is_zstd(first):
        try:
            inner = jax_executable(itertools.chain([first], source), limit=limit)
        except (WireError, zlib.error) as exc:
            return ParsedEntry(None, f"compressed: {exc}")
        if inner is None:
            return ParsedEntry(None, "compressed, but no JAX executable inside")
        return _parse_executable(inner, limit)
    return _parse_executable(itertools.chain([first], source), limit)


def _parse_executable(chunks: Iterator[bytes], limit: int) -> ParsedEntry:
    prefix = Prefix(chunks, limit)
    why = NO_MODULE
    budget = Budget()  # shared by every candidate module: refused ones cost at most about one walk
    try:
        try:
            span = _locate_module(prefix)
        except WireError:
            span = None  # not this layout: perhaps a TPU executable's
        if span is not None and prefix.ensure(span[1]):
            info = _module_info(prefix.buf, *span, budget)  # a WireError here: its module broke a bound
            if info is not None:
                return ParsedEntry(info)
        for start, end in tpu_module_spans(prefix):  # not a CPU/GPU layout: a TPU executable's?
            try:
                info = _module_info(prefix.buf, start, end, budget)
            except WireError as exc:
                why = str(exc)
                continue  # not a module after all: the next candidate
            if info is not None:
                return ParsedEntry(info)
        return ParsedEntry(None, why)
    except (WireError, zlib.error) as exc:
        return ParsedEntry(None, str(exc) or type(exc).__name__)
