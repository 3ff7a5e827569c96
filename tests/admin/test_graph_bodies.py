"""What a graph computes beyond its shapes (``cache_server.parsing.instructions``) and the sizes baked into it
(``cache_server.graphs.baked``), read from real JAX 0.10.2 and torch_xla 2.7 CPU entries, and from crafted
modules that try to make the parser slow, large or deep."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
import zstandard

from cache_server.graphs.baked import describe_changes, internal_axes, size_changes
from cache_server.parsing.body import MAX_OPS_TEXT, Body, body_from_text
from cache_server.parsing.hlo import GraphInfo, parse_entry
from cache_server.parsing.instructions import MAX_OPS
from tests.support.crafted_entries import field, instruction, module_entry, shape, varint, varint_field
from tests.support.real_entries import real_entries

BAKED = Path(__file__).parent / "fixtures" / "jax_0.10.2_cpu_baked"
GENERATOR = "generate_baked_entries.py"


def baked(name: str) -> GraphInfo:
    info = parse_entry([(BAKED / name).read_bytes()])
    assert info is not None and info.body is not None
    return info


def body(info: GraphInfo) -> Body:
    assert info.body is not None
    return info.body


def test_entries_of_one_step_at_other_baked_sizes_share_their_structure_and_input_shapes() -> None:
    n3, n5, n9, rows32 = (baked(n) for n in ("n3-rows16", "n5-rows16", "n9-rows16", "n5-rows32"))
    assert {i.module for i in (n3, n5, n9, rows32)} == {"jit_baked_step"}
    assert n3.shapes == n5.shapes == n9.shapes == "(f32[16,4]) -> f32[16]"  # one input shape
    assert len({body(i).structure for i in (n3, n5, n9, rows32)}) == 1  # one graph, sizes aside
    assert len({body(i).program for i in (n3, n5, n9, rows32)}) == 4  # four computations


def test_the_sizes_that_differ_are_named_with_op_source_and_values() -> None:
    n3, n9 = baked("n3-rows16"), baked("n9-rows16")
    changes = size_changes(body(n9), body(n3))
    assert changes is not None
    found = {(c.op.opcode, c.attribute, c.index): (c.ours, c.theirs) for c in changes}
    assert found[("slice", "limit", 0)] == (9, 3)  # x[:n]
    assert found[("pad", "high", 0)] == (16 - 9, 16 - 3)  # padded back to 16 rows
    slice_change = next(c for c in changes if c.op.opcode == "slice")
    assert slice_change.op.op is not None and "slice" in slice_change.op.op
    assert slice_change.op.source is not None and f"{GENERATOR}:" in slice_change.op.source
    assert changes[0].op.opcode in {"slice", "pad"}  # the most telling first
    text = describe_changes(changes)
    assert "limit[0] 9 (stored: 3)" in text and "high[0] 7 (stored: 13)" in text


def test_internal_axes_fold_the_sizes_that_follow_from_one_another() -> None:
    bodies = [body(baked(n)) for n in ("n3-rows16", "n5-rows16", "n9-rows16")]
    axes, points = internal_axes(bodies)
    assert len(axes) == 1  # the pad's width, the broadcast and the literal follow from the slice's limit
    (axis,) = axes
    assert (axis.op.opcode, axis.attribute, axis.index, axis.values) == ("slice", "limit", 0, (3, 5, 9))
    assert axis.folded >= 1 and f"{GENERATOR}:" in axis.label
    assert points == [(3,), (5,), (9,)]
    assert axis.bytes_at(16) == 16 * 4 * 4  # the slice's f32 result at 16 rows of 4


def test_a_body_survives_the_index_text() -> None:
    info = baked("n5-rows16")
    kept = body(info)
    again = body_from_text(kept.structure, kept.program, kept.whole, kept.ops_text())
    assert again == kept
    assert body_from_text("s", "p", "w", "not json") is None
    assert body_from_text("s", "p", "w", '{"n": 1, "t": false, "ops": [["x"]]}') is None


def test_torch_xla_variants_at_other_input_shapes_share_a_structure_and_other_graphs_do_not() -> None:
    infos = [i for i in (parse_entry([d]) for d in real_entries().values()) if i is not None and i.body]
    by_module: dict[str, set[str]] = {}
    for info in infos:
        by_module.setdefault(info.module, set()).add(body(info).structure)
    assert set(by_module) == {"SyncTensorsGraph.15", "SyncTensorsGraph.12"}
    assert len(by_module["SyncTensorsGraph.15"]) == 1  # three input shapes of one graph
    assert by_module["SyncTensorsGraph.15"] != by_module["SyncTensorsGraph.12"]


def test_metadata_alone_leaves_the_program_digest_as_it_is() -> None:
    """What XLA_HLO_DEBUG changes (op names, source lines) changes the whole module's digest only."""
    data = (BAKED / "n5-rows16").read_bytes()
    raw = zstandard.ZstdDecompressor().decompressobj().decompress(data)  # JAX compresses with zstd
    assert raw.count(b"baked_step") >= 2
    edited = raw.replace(b"jit(baked_step)", b"jit(bXked_step)")
    assert edited != raw
    again = parse_entry([zstandard.ZstdCompressor().compress(edited)])
    original = baked("n5-rows16")
    assert again is not None and again.shapes == original.shapes
    assert body(again).program == body(original).program
    assert body(again).structure == body(original).structure
    assert body(again).whole != body(original).whole


# -- crafted modules -------------------------------------------------------------------------------------
def _bounded(data: bytes, seconds: float, mebibytes: float) -> GraphInfo | None:
    tracemalloc.start()
    started = time.process_time()
    try:
        info = parse_entry([data])
        spent = time.process_time() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert spent < seconds, f"{spent:.2f} s of CPU"
    assert peak < mebibytes * 2**20, f"{peak / 2**20:.1f} MiB at the peak"
    return info


def test_a_huge_repeated_field_is_read_only_up_to_its_bound() -> None:
    dims = field(
        3, varint_field(2, 11) + b"".join(varint_field(3, 7) for _ in range(150_000))
    )  # 150,000 unpacked dims
    slices = b"".join(field(17, varint_field(2, 5)) for _ in range(100_000))
    info = _bounded(module_entry(instruction(b"slice", dims, slices)), seconds=10, mebibytes=64)
    assert info is not None and info.body is not None
    (op,) = info.body.ops
    assert len(op.sizes["limit"]) <= 64 and len(op.result) < 1000


def test_many_sized_ops_keep_the_most_telling_up_to_the_bound() -> None:
    ops = [instruction(b"reshape") for _ in range(MAX_OPS)] + [
        instruction(b"slice", field(17, varint_field(2, 3)))
    ]
    info = _bounded(module_entry(b"".join(ops)), seconds=20, mebibytes=256)
    assert info is not None and info.body is not None
    assert info.body.truncated and len(info.body.ops) == MAX_OPS
    assert any(op.opcode == "slice" for op in info.body.ops)  # kept before the reshapes
    text = info.body.ops_text()  # what the index keeps is bounded too, the most telling first
    assert len(text) <= MAX_OPS_TEXT + 100
    kept = body_from_text("s", "p", "w", text)
    assert kept is not None and kept.truncated and any(op.opcode == "slice" for op in kept.ops)


@pytest.mark.parametrize(
    "crafted",
    [
        # a length near 2**63 inside an instruction
        module_entry(field(2, varint(2 << 3 | 2) + varint(2**63 - 5) + b"x")),
        # a varint longer than ten bytes
        module_entry(field(2, varint(35 << 3) + b"\xff" * 20)),
    ],
)
def test_crafted_modules_parse_quickly_to_something_or_nothing(crafted: bytes) -> None:
    _bounded(crafted, seconds=2, mebibytes=32)


def test_deeply_nested_tuple_shapes_are_refused_without_recursing() -> None:
    nested = shape(11, 4)
    for _ in range(5_000):
        nested = varint_field(2, 13) + field(4, nested)
    info = _bounded(
        module_entry(instruction(b"add"), field(1, nested) + field(2, shape(11))), seconds=2, mebibytes=64
    )
    assert info is None
