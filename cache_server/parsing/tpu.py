"""Where the HLO module is in a TPU executable (JAX's TPU entries; libtpu's serialization).

A JAX TPU entry is compressed as a CPU one is (a 4-byte compile time, a length-prefixed IFRT header), but
what follows is not an ``xla.ExecutableAndOptionsProto``: libtpu writes a sequence of length-delimited
messages (each a varint length, then that many bytes). Read off real entries of libtpu 0.0.42 (jax[tpu]
0.10.2, compiled deviceless for v5e, v5p and v6e topologies: ``tests/admin/fixtures/make_tpu_entries.py``):

- the first message is the machine code (most of a large entry's bytes);
- the second is the executable's description, whose field 38 is the **pre-optimization global
  HloModuleProto** (``ENTRY main``, the global parameter shapes the user's ``jit`` saw, op metadata and
  the module's stack frames) and whose field 6 holds the optimized per-device module;
- a later message holds the optimized per-device module again.

:func:`tpu_module_spans` yields the spans worth trying, the global module first: the field 38 of each of
the first :data:`MAX_MESSAGES` messages. Each message is skipped by its length (its bytes are read, as a
compressed stream must be, but not parsed), so the machine code costs its decompression only.
"""

from __future__ import annotations

from collections.abc import Iterator

from cache_server.parsing.wire import Prefix, WireError, iter_fields

__all__ = ["GLOBAL_MODULE_FIELD", "MAX_FIELDS", "MAX_MESSAGES", "tpu_module_spans"]

MAX_MESSAGES = 8  # length-delimited messages looked into (real entries: 6)
MAX_FIELDS = 10_000  # top-level fields read of one message (a real description has a few dozen)
GLOBAL_MODULE_FIELD = 38  # the executable description's pre-optimization global HloModuleProto


def tpu_module_spans(prefix: Prefix) -> Iterator[tuple[int, int]]:
    """``(start, end)`` in ``prefix.buf`` of each candidate HLO module of a TPU executable (see the module
    docstring), reading the blob only as far as needed. Yields nothing for other bytes."""
    pos = 0
    for _ in range(MAX_MESSAGES):
        if not prefix.ensure(pos + 1):
            return
        length, start = prefix.varint(pos)
        end = start + length
        if length == 0:
            pos = end
            continue
        if not prefix.ensure(end):
            return
        found: list[tuple[int, int]] = []
        try:
            for count, (number, wire, value, stop) in enumerate(iter_fields(prefix.buf, start, end)):
                if count >= MAX_FIELDS:
                    break  # no description has this many: machine code that happens to parse
                if number == GLOBAL_MODULE_FIELD and wire == 2:
                    found.append((value, stop))
        except WireError:  # not a message (the machine code): skipped by its length
            pass
        yield from found
        pos = end
