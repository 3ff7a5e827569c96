"""Entry bytes made by hand, protobuf field by field: the shapes of an HLO module's program as torch_xla's
executable layout nests it, and the third probe's entries (issue 36) that break the graph parser's bounds:
tuple shapes nested 700 deep, a zlib "bomb" of empty repeated fields, a shapes text of millions of
characters; and the fourth probe's (issue 42): one graph at many baked sizes, whose ops texts are as large
as the index keeps."""

from __future__ import annotations

import zlib

__all__ = ["bomb", "cut", "executable", "f32", "field", "nested", "sliced", "varint", "varint_field"]


def varint(value: int) -> bytes:
    """A protobuf base-128 varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def varint_field(number: int, value: int) -> bytes:
    """A varint field (wire type 0)."""
    return varint(number << 3) + varint(value)


def executable(program_shape: bytes, *, extra: bytes = b"") -> bytes:
    module = field(1, b"crafted") + field(4, program_shape) + extra
    return field(1, field(1, field(1, module)))


def f32(*dims: int) -> bytes:
    return varint_field(2, 11) + b"".join(varint_field(3, d) for d in dims)


def nested(depth: int, salt: int) -> bytes:
    shape = f32(salt)
    for _ in range(depth):
        shape = varint_field(2, 13) + field(4, shape)
    return executable(field(1, shape))


def bomb(salt: int) -> bytes:
    header = b"\x0a\x04ifrt"
    module = executable(field(1, f32(salt)), extra=b"\x1a\x00" * (1024 * 1024))
    return zlib.compress(salt.to_bytes(4, "big") + bytes([len(header)]) + header + module, 9)


def cut(salt: int) -> bytes:
    return executable(b"".join(field(1, f32(2**62, 2**62, salt)) for _ in range(1_000)))


def _sized_shape(element: int, *dims: int) -> bytes:
    return varint_field(2, element) + field(3, b"".join(varint(d) for d in dims))


def sliced(salt: int, ops: int = 1000) -> bytes:
    """A torch_xla-style entry of one module, ``crafted``, of ``ops`` slices of an ``f32[4]`` parameter whose
    limits depend on ``salt``: entries of other salts are one graph (one structure, the same input shapes)
    at other sizes inside it, each op a size that differs (1,000 ops: an ops text of about 64 KiB)."""
    instructions = b"".join(
        field(
            2,
            field(1, b"op")
            + field(2, b"slice")
            + field(3, _sized_shape(11, 4))
            + field(17, varint_field(2, (index * 7 + salt) % 1000 + 1)),
        )
        for index in range(ops)
    )
    params = field(1, _sized_shape(11, 4)) + field(2, _sized_shape(11, 4))
    module = field(1, b"crafted") + field(3, field(1, b"main") + instructions) + field(4, params)
    return field(1, field(1, field(1, module)))
