"""Entry bytes made by hand, protobuf field by field: the shapes of an HLO module's program as torch_xla's
executable layout nests it, and the third probe's entries (issue 36) that break the graph parser's bounds:
tuple shapes nested 700 deep, a zlib "bomb" of empty repeated fields, a shapes text of millions of
characters; modules of crafted instructions (:func:`module_entry`, :func:`instruction`), such as the
fourth probe's (issue 42) graphs of a thousand slices whose limits differ per entry (:func:`sliced`), and
its entries that cost the parser (TPU candidates, long source strings, inflating and wide modules)."""

from __future__ import annotations

import zlib

__all__ = [
    "bomb",
    "cut",
    "executable",
    "executable_of",
    "f32",
    "field",
    "inflating",
    "instruction",
    "jax_zlib",
    "long_sources",
    "module",
    "module_entry",
    "nested",
    "shape",
    "sliced",
    "tpu_candidates",
    "varint",
    "varint_field",
    "wide",
]


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


def shape(element: int, *dims: int) -> bytes:
    """A ShapeProto: element type (11: f32, 13: tuple) and dimensions."""
    return varint_field(2, element) + field(3, b"".join(varint(d) for d in dims))


def module_entry(instructions: bytes, host_shape: bytes | None = None, *, name: bytes = b"crafted") -> bytes:
    """A torch_xla-style entry: ExecutableAndOptionsProto, executable, module with config, module (one
    computation, ``main``, of ``instructions``)."""
    params = host_shape if host_shape is not None else field(1, shape(11, 4)) + field(2, shape(11, 4))
    module = field(1, name) + field(3, field(1, b"main") + instructions) + field(4, params)
    return field(1, field(1, field(1, module)))


def instruction(opcode: bytes, *more: bytes) -> bytes:
    """One instruction named ``op`` with an f32[4] result and the fields ``more``."""
    return field(2, field(1, b"op") + field(2, opcode) + field(3, shape(11, 4)) + b"".join(more))


def sliced(salt: int, *, module: bytes = b"crafted", ops: int = 1_000) -> bytes:
    """The fourth probe's entry (issue 42): ``ops`` slices whose limits differ with ``salt``, in JAX's
    zlib-compressed layout: ~500 bytes uploaded, a body of one structure (whatever ``salt``) at one input
    shape, whose sized ops fill the index's 64 KiB of ops text."""
    slices = b"".join(
        instruction(
            b"slice",
            field(17, varint_field(1, 0) + varint_field(2, (salt * 7 + i) % 97 + 1) + varint_field(3, 1)),
        )
        for i in range(ops)
    )
    header = b"\x0a\x04ifrt"
    jax_layout = salt.to_bytes(4, "big") + bytes([len(header)]) + header + module_entry(slices, name=module)
    return zlib.compress(jax_layout, 9)


# -- the fourth probe's entries (issue 42, item 3) -------------------------------------------------------
def jax_zlib(payload: bytes, *, salt: int = 0) -> bytes:
    """``payload`` as JAX stores an executable: zlib over a 4-byte compile time and an IFRT header."""
    header = b"\x0a\x04ifrt"
    return zlib.compress(salt.to_bytes(4, "big") + bytes([len(header)]) + header + payload, 9)


def module(name: bytes, computations: list[bytes], *, extra: bytes = b"") -> bytes:
    """An HloModuleProto: a name, a one-parameter program shape, these computations' bodies."""
    shape = field(1, f32(3)) + field(2, f32(3))
    return field(1, name) + field(4, shape) + b"".join(field(3, c) for c in computations) + extra


def tpu_candidates(
    salt: int, *, candidates: int = 16, instructions: int = 250_000, flaw: str = "tail"
) -> bytes:
    """A TPU entry (libtpu's sequence of messages) whose description holds ``candidates`` field-38 modules,
    each of ``instructions`` empty instructions and a ``flaw``: a field cut short after them (``tail``: the
    probe's, 16 of 250,000 in about 8 KiB, every one walked and refused), inside the last instruction
    (``instruction``: only walking it finds it), or ``none``."""
    body = b"\x12\x00" * instructions
    if flaw == "tail":
        body += b"\x12\x7f"  # a field of 127 bytes with none after it
    elif flaw == "instruction":
        body = body[:-2] + field(2, b"\x1a\x7f")  # the last instruction's shape: 127 bytes, none there
    computation = field(1, b"main") + body
    candidate = module(b"jit_probe%d" % salt, [computation])
    description = b"".join(field(38, candidate) for _ in range(candidates))
    machine_code = b"\x07" * 64  # no message: skipped by its length
    messages = b"".join(varint(len(m)) + m for m in (machine_code, description))
    return jax_zlib(messages, salt=salt)


def long_sources(salt: int, *, strings: int = 120, size: int = 1024 * 1024) -> bytes:
    """A CPU-layout JAX entry whose instructions' metadata name a different ``size``-byte source file each
    (the probe's: 120 of 1 MiB in 124 KiB)."""
    instructions = b"".join(
        field(2, field(1, b"add.%d" % n) + field(2, b"add") + field(7, field(3, b"%d/" % n + b"a" * size)))
        for n in range(strings)
    )
    return jax_zlib(executable_of(module(b"jit_sources%d" % salt, [field(1, b"main") + instructions])))


def executable_of(module_bytes: bytes) -> bytes:
    """The torch_xla (and JAX CPU) layout around a module: field 1, three levels down."""
    return field(1, field(1, field(1, module_bytes)))


def inflating(salt: int, *, mib: int) -> bytes:
    """A JAX entry whose module holds ``mib`` MiB of one skipped field: the parser must hold it all."""
    big = field(99, b"\0" * (mib * 1024 * 1024))
    return jax_zlib(executable_of(module(b"jit_big%d" % salt, [field(1, b"main")], extra=big)))


def wide(salt: int, *, instructions: int) -> bytes:
    """A valid JAX entry of ``instructions`` small instructions: slow to walk, parsed to a body."""
    one = field(1, b"add") + field(2, b"add") + field(3, f32(4, 4)) + b"\x20\x01"
    computation = field(1, b"main") + field(2, one) * instructions
    return jax_zlib(executable_of(module(b"jit_wide%d" % salt, [computation])), salt=salt)
