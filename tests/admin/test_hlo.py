"""Reading the graph out of real torch_xla entries, without an XLA schema."""

from __future__ import annotations

import os
import resource
import zlib
from collections.abc import Iterator

import zstandard

from cache_server.parsing import hlo
from cache_server.parsing.hlo import GraphInfo, iter_fields, parse_entry
from tests.support.crafted_entries import executable, f32, field, varint_field
from tests.support.real_entries import real_entries

SOURCE = "tests/admin/fixtures/generate_entries.py"


def parsed() -> dict[str, GraphInfo | None]:
    return {key: parse_entry([data]) for key, data in real_entries().items()}


def test_real_entries_give_module_shapes_and_source_line() -> None:
    infos = [info for info in parsed().values() if info is not None]
    assert len(infos) == 4
    fuse = sorted(info.shapes for info in infos if info.source and info.source.endswith(f"{SOURCE}:20"))
    assert fuse == [
        "(f32[16,3], f32[2,16]) -> (f32[3])",
        "(f32[16,3], f32[4,16]) -> (f32[3])",
        "(f32[16,3], f32[8,16]) -> (f32[3])",
    ]
    assert {info.module for info in infos if info.shapes in fuse} == {"SyncTensorsGraph.15"}
    other = [info for info in infos if info.shapes not in fuse]
    assert [(o.module, o.shapes) for o in other] == [
        ("SyncTensorsGraph.12", "(f32[], f32[5,5]) -> (f32[5,5])")
    ]
    assert other[0].source is not None and other[0].source.endswith(f"{SOURCE}:30")
    assert len({info.signature for info in infos}) == 4  # each variant has its own signature


def test_same_result_whatever_the_chunking() -> None:
    for data in real_entries().values():
        whole = parse_entry([data])
        assert parse_entry(data[i : i + 1] for i in range(len(data))) == whole
        assert parse_entry(data[i : i + 777] for i in range(0, len(data), 777)) == whole


def test_what_is_not_an_entry_parses_to_none() -> None:
    data = next(iter(real_entries().values()))
    assert parse_entry([b""]) is None
    assert parse_entry([b"hello, not a protobuf"]) is None
    assert parse_entry([os.urandom(4096)]) is None
    assert parse_entry([data[:300]]) is None  # cut inside the HLO module
    assert parse_entry([b"\x0a\x03abc"]) is None  # a valid message without the executable's layout


def test_reads_only_up_to_the_end_of_the_module() -> None:
    data = next(iter(real_entries().values()))
    # The real layout: outer field 1 = compilation result, whose field 1 = module with config.
    outer = list(iter_fields(data))
    _, _, start, end = outer[0]
    result = data[start:end]
    _, _, m_start, m_end = next(iter_fields(result))
    with_config = result[m_start:m_end]
    object_code = b"\0" * (64 * 1024 * 1024)
    big = field(1, field(1, with_config) + field(4, object_code))

    consumed = 0

    def chunks() -> Iterator[bytes]:
        nonlocal consumed
        for i in range(0, len(big), 64 * 1024):
            consumed += 1
            yield big[i : i + 64 * 1024]

    assert parse_entry(chunks()) == parse_entry([data])
    assert consumed <= 2  # 128 KiB of a 64 MiB entry


def test_jax_layout_parses_compressed_with_zlib_or_zstandard() -> None:
    """A JAX entry: a 4-byte compile time, a length-prefixed IFRT header, then the executable, compressed as
    JAX compresses it (zlib, or zstandard where JAX finds it installed)."""
    header = b"\x0a\x04ifrt"  # an opaque header of six bytes
    for key, data in real_entries().items():
        plain = (1234).to_bytes(4, "big") + bytes([len(header)]) + header + data
        expected = parse_entry([data])
        assert parse_entry([zlib.compress(plain)]) == expected, key
        compressed = zstandard.ZstdCompressor(level=3).compress(plain)
        assert parse_entry([compressed]) == expected, key
        pieces = [compressed[i : i + 100] for i in range(0, len(compressed), 100)]
        assert parse_entry(pieces) == expected, key
    assert parse_entry([b"\x28\xb5\x2f\xfd" + b"not really zstd"]) is None


def test_a_zstd_entry_that_asks_for_a_huge_window_is_not_parsed() -> None:
    """The window is memory the parser holds while decoding: ``zstd --long`` asks for 128 MiB, which no
    entry JAX writes needs. Such an entry is left unparsed; a window of up to 8 MiB is read as usual."""
    key, data = next(iter(real_entries().items()))
    plain = (1234).to_bytes(4, "big") + b"\x06\x0a\x04ifrt" + data

    def frame(window_log: int) -> bytes:
        params = zstandard.ZstdCompressionParameters.from_level(3, window_log=window_log)
        compressor = zstandard.ZstdCompressor(compression_params=params).compressobj()  # no size in the frame
        return compressor.compress(plain) + compressor.flush()

    assert parse_entry([frame(23)]) == parse_entry([data]) is not None, key
    assert parse_entry([frame(27)]) is None


# -- the third probe's entries (issue 36; tests/support/crafted_entries.py): bytes that break the bounds --
def test_a_shapes_text_past_its_bound_is_cut_with_a_marker() -> None:
    """The probe's 4,000,017-character shapes text: cut at MAX_SHAPES_TEXT, and still told apart."""
    params = b"".join(field(1, f32(2**62, 2**62, 2**62)) for _ in range(5_000))
    info = parse_entry([executable(params)])
    assert info is not None and info.shapes.endswith(hlo.CUT_MARKER)
    assert len(info.shapes) <= hlo.MAX_SHAPES_TEXT + 20
    other = parse_entry([executable(params + field(1, f32(1)))])
    assert other is not None and other.shapes == info.shapes and other.signature != info.signature
    small = parse_entry([executable(field(1, f32(2, 3)) + field(2, f32(4)))])
    assert small is not None and small.shapes == "(f32[2,3]) -> f32[4]"


def test_tuple_shapes_nested_past_the_depth_bound_are_unparseable() -> None:
    """The probe's 700 nested tuples (3 KB): no RecursionError, the entry parses to None."""
    shape = f32(1)
    for _ in range(700):
        shape = varint_field(2, 13) + field(4, shape)
    assert parse_entry([executable(field(1, shape))]) is None


def test_repeated_fields_past_their_bound_are_unparseable_before_allocation() -> None:
    """The probe's 16 KB zlib entry: 16 MiB of empty repeated fields once inflated (the parser grew to
    1,145 MiB); the count is checked before each is kept, so it parses to None in bounded memory."""
    empties = b"\x1a\x00" * (8 * 1024 * 1024)  # 8 M empty `computations` fields
    header = b"\x0a\x04ifrt"
    plain = (
        (1).to_bytes(4, "big") + bytes([len(header)]) + header + executable(field(1, f32(1)), extra=empties)
    )
    packed = zlib.compress(plain, 9)
    assert len(packed) < 64 * 1024
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert parse_entry([packed]) is None
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 200, grown_mib
    dims = varint_field(2, 11) + field(3, b"\x01" * (hlo.MAX_SHAPE_FIELDS + 1))  # packed dimensions
    assert parse_entry([executable(field(1, dims))]) is None
