"""The protobuf wire format, read without a schema: each message's fields by number, skipped unread unless
wanted. Bounded by the buffer it is given; malformed bytes raise :class:`WireError` (never anything else).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

__all__ = [
    "MAX_TEXT",
    "Buffer",
    "Prefix",
    "WireError",
    "ints",
    "iter_fields",
    "read",
    "same_bytes",
    "text",
    "varint",
]

Buffer = bytes | bytearray | memoryview


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def iter_fields(buf: Buffer, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int]]:
    """Yield ``(field number, wire type, value, end)`` for each field of the message in ``buf[start:end]``.

    For length-delimited fields (wire type 2) ``value`` is the offset where the payload starts and ``end``
    where it stops; for varints ``value`` is the number; fixed-width values are skipped (value 0).
    """
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        tag = buf[pos]  # most tags and values are one byte: read those without a call
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == 0:
            if pos < end and buf[pos] < 0x80:
                value = buf[pos]
                pos += 1
            else:
                value, pos = varint(buf, pos, end)
            yield number, wire, value, pos
        elif wire == 1 or wire == 5:
            pos += 8 if wire == 1 else 4
            if pos > end:
                raise WireError("truncated fixed-width field")
            yield number, wire, 0, pos
        elif wire == 2:
            if pos < end and buf[pos] < 0x80:
                length = buf[pos]
                pos += 1
            else:
                length, pos = varint(buf, pos, end)
            if pos + length > end:
                raise WireError("truncated length-delimited field")
            yield number, wire, pos, pos + length
            pos += length
        else:
            raise WireError(f"unsupported wire type {wire}")


def read(
    buf: Buffer,
    start: int,
    end: int,
    wanted: dict[str, int],
    limit: int | None = None,
    *,
    strict: bool = False,
) -> dict[str, list[tuple[int, int, int]]]:
    """The wanted fields of one message, by name: each occurrence as (wire type, value/start, end). With
    ``limit``, at most that many occurrences of a field are kept: the first ones and the last (which is
    the one a singular field takes); with ``strict`` too, one more occurrence raises :class:`WireError`
    instead (checked before it is kept: the lists never grow past the limit)."""
    by_number = {number: name for name, number in wanted.items()}
    found: dict[str, list[tuple[int, int, int]]] = {name: [] for name in wanted}
    most = sys.maxsize if limit is None else max(limit, 1)
    for number, wire, value, stop in iter_fields(buf, start, end):
        name = by_number.get(number)
        if name is not None:
            occurrences = found[name]
            if len(occurrences) < most:
                occurrences.append((wire, value, stop))
            elif strict:
                raise WireError(f"more than {most} {name} fields")
            else:
                occurrences[-1] = (wire, value, stop)
    return found


MAX_TEXT = 256  # characters of a string field :func:`text` returns (a module, op or file name)


def text(buf: Buffer, field: list[tuple[int, int, int]], limit: int = MAX_TEXT) -> str | None:
    """A string field (its last occurrence), at most ``limit`` characters: the bytes past ``4 * limit`` are
    never copied nor decoded, so a name of a MiB costs what one of a line does."""
    if not field or field[-1][0] != 2:
        return None
    _, start, end = field[-1]
    return bytes(buf[start : min(end, start + 4 * limit)]).decode("utf-8", errors="replace")[:limit]


def same_bytes(buf: Buffer, one: list[tuple[int, int, int]], other: list[tuple[int, int, int]]) -> bool:
    """Whether two string fields (their last occurrences) hold the same bytes, compared in place."""
    if not one or not other or one[-1][0] != 2 or other[-1][0] != 2:
        return False
    view = memoryview(buf)
    return view[one[-1][1] : one[-1][2]] == view[other[-1][1] : other[-1][2]]


def ints(
    buf: Buffer, field: list[tuple[int, int, int]], limit: int | None = None, *, strict: bool = False
) -> list[int]:
    """A repeated integer field, packed (wire type 2) or not; its first ``limit`` numbers, if given (with
    ``strict``, more than ``limit`` raise :class:`WireError`)."""
    numbers: list[int] = []
    most = sys.maxsize if limit is None else limit
    for wire, value, end in field:
        if len(numbers) >= most:
            if strict:
                raise WireError(f"more than {most} numbers in a repeated field")
            break
        if wire == 0:
            numbers.append(value)
        elif wire == 2:
            pos = value
            while pos < end and len(numbers) < most:
                number, pos = varint(buf, pos, end)
                numbers.append(number)
            if strict and pos < end:
                raise WireError(f"more than {most} numbers in a repeated field")
    return numbers


class Prefix:
    """The first bytes of a blob, read from its chunk iterator only as far as asked."""

    def __init__(self, chunks: Iterator[bytes], limit: int) -> None:
        self._chunks = chunks
        self._limit = limit
        self.buf = bytearray()

    def ensure(self, size: int) -> bool:
        """Read until ``size`` bytes are here; False at the end of the blob or past the limit."""
        if size > self._limit:
            return False
        while len(self.buf) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                return False
            self.buf += chunk
        return True

    def rest(self) -> Iterator[bytes]:
        """The chunks not read yet."""
        return self._chunks

    def varint(self, pos: int) -> tuple[int, int]:
        """The varint at ``pos`` and the position after it, reading more of the blob if needed."""
        self.ensure(pos + 10)  # a varint is at most 10 bytes; a shorter blob is fine
        return varint(self.buf, pos, len(self.buf))
