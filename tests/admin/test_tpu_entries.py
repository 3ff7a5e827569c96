"""Real JAX TPU entries (libtpu 0.0.42.1, compiled deviceless for v5e, v6e and v5p topologies by
``fixtures/make_tpu_entries.py``, kept as test data) parse as CPU entries do: the module, the global
parameter shapes the user's jit saw, and the body that names baked sizes; and they give the same baked
sizes and internal axes as the same function's CPU entries. Damaged TPU entries parse quickly to something
or nothing, never an exception."""

from __future__ import annotations

import json
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from cache_server.graphs.baked import internal_axes, size_changes
from cache_server.graphs.shapes import differing_dimensions, parse_shape_signature
from cache_server.parsing.body import Body
from cache_server.parsing.hlo import GraphInfo, ParsedEntry, parse_entry, read_entry
from cache_server.parsing.instructions import MAX_INSTRUCTIONS
from tests.support.crafted_entries import tpu_candidates

FIXTURES = Path(__file__).parent / "fixtures"
TPU = FIXTURES / "jax_0.10.2_tpu"
CPU_BAKED = FIXTURES / "jax_0.10.2_cpu_baked"
MANIFEST: dict[str, Any] = json.loads((TPU / "manifest.json").read_text())
ENTRIES = {entry["file"]: entry for entry in MANIFEST["entries"]}
GENERATIONS = sorted({name.split("-")[0] for name in ENTRIES})


def parsed(name: str, folder: Path = TPU) -> GraphInfo:
    info = parse_entry([(folder / name).read_bytes()])
    assert info is not None, name
    return info


def body(info: GraphInfo) -> Body:
    assert info.body is not None
    return info.body


def test_the_kept_entries_are_what_the_manifest_says() -> None:
    assert MANIFEST["versions"] == {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1"}
    assert GENERATIONS == ["v5e", "v5p", "v6e"]
    assert sum(path.stat().st_size for path in TPU.iterdir()) < 1_000_000


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_every_tpu_entry_gives_its_module_and_global_parameter_shapes(name: str) -> None:
    entry = ENTRIES[name]
    info = parsed(name)
    assert info.module == f"jit_{entry['function']}"
    assert info.shapes.startswith(entry["params"] + " -> ")
    assert info.body is not None and info.body.instructions > 0


def test_an_input_sharded_over_the_mesh_is_recorded_at_its_global_shape() -> None:
    """The 8-row input split over 4 devices: each device compiles 2 rows; the entry says 8, as jit saw."""
    assert ENTRIES["v5e-step-rows8"]["sharded"]
    assert parsed("v5e-step-rows8").shapes == "(f32[8,16]) -> f32[8]"


def test_new_input_shapes_of_one_graph_name_the_dimension() -> None:
    rows = {n: parsed(f"v5e-step-rows{n}") for n in (2, 4)}
    assert len({info.signature for info in rows.values()}) == 2
    ours, theirs = parse_shape_signature(rows[4].shapes), parse_shape_signature(rows[2].shapes)
    assert ours is not None and theirs is not None
    found = differing_dimensions(ours, theirs)
    assert found is not None and [(d.param, d.dim, d.ours, d.theirs) for d in found] == [(0, 0, 4, 2)]
    assert body(rows[2]).structure == body(rows[4]).structure  # one graph at two shapes


@pytest.mark.parametrize("generation", GENERATIONS)
def test_baked_sizes_on_tpu_name_the_same_slice_and_sizes_as_on_cpu(generation: str) -> None:
    tpu = {n: parsed(f"{generation}-baked_step-n{n}") for n in (3, 5, 9)}
    cpu = {n: parsed(f"n{n}-rows16", CPU_BAKED) for n in (3, 5, 9)}
    for infos in (tpu, cpu):
        assert len({info.shapes for info in infos.values()}) == 1  # one input shape
        assert len({body(info).structure for info in infos.values()}) == 1  # one graph
    for infos in (tpu, cpu):
        changes = size_changes(body(infos[9]), body(infos[3]))
        assert changes is not None
        found = {(c.op.opcode, c.attribute, c.index): (c.ours, c.theirs) for c in changes}
        assert found[("slice", "limit", 0)] == (9, 3)
        assert found[("pad", "high", 0)] == (7, 13)
    tpu_slice = next(c for c in size_changes(body(tpu[9]), body(tpu[3])) or [] if c.op.opcode == "slice")
    assert tpu_slice.op.source is not None and "make_tpu_entries.py:" in tpu_slice.op.source
    for infos in (tpu, cpu):
        axes, points = internal_axes([body(infos[n]) for n in (3, 5, 9)])
        assert [(a.op.opcode, a.attribute, a.index, a.values) for a in axes] == [
            ("slice", "limit", 0, (3, 5, 9))
        ]
        assert points == [(3,), (5,), (9,)]


def test_the_same_function_compiles_to_the_same_global_module_on_every_generation() -> None:
    """The global module is what jit lowered, before libtpu optimized it for a chip."""
    programs = {body(parsed(f"{g}-other-5x5")).program for g in GENERATIONS}
    assert len(programs) == 1


def _damaged(data: bytes) -> list[bytes]:
    raw = zlib.decompress(data)
    variants = [raw[:cut] for cut in (10, 100, len(raw) // 3, len(raw) // 2, len(raw) - 100)]
    for place in range(200, len(raw), max(1, len(raw) // 40)):
        flipped = bytearray(raw)
        flipped[place] ^= 0xFF
        variants.append(bytes(flipped))
    # a length near 2**63 where the second message's length is
    variants.append(raw[:200] + b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f" + raw[209:])
    return [zlib.compress(v) for v in variants]


@pytest.mark.parametrize("name", ["v5e-step-rows4", "v6e-baked_step-n5"])
def test_damaged_tpu_entries_parse_quickly_to_something_or_nothing(name: str) -> None:
    data = (TPU / name).read_bytes()
    assert data[:1] == b"\x78"  # zlib: the environment that made them had no zstandard
    started = time.process_time()
    for damaged in _damaged(data):
        info = parse_entry([damaged])
        assert info is None or isinstance(info, GraphInfo)
    assert time.process_time() - started < 10


def _cpu_seconds(data: bytes) -> tuple[float, ParsedEntry]:
    started = time.process_time()
    parsed = read_entry([data])
    return time.process_time() - started, parsed


def test_many_candidate_modules_at_the_bound_are_refused_in_well_under_a_second() -> None:
    """The fourth probe (issue 42): 8 KiB entries whose 16 candidate modules of 250,000 instructions each
    were every one walked and refused (17 s an entry); the instructions are counted first, and one entry's
    candidates share one budget."""
    for salt in range(2):
        data = tpu_candidates(salt)
        assert len(data) < 9_000
        seconds, parsed = _cpu_seconds(data)
        assert parsed.info is None and parsed.why, parsed
        assert seconds < 0.5, seconds


def test_candidates_refused_deep_inside_their_last_instruction_cost_about_one_walk() -> None:
    """Candidates whose flaw only the walk finds (in their last instruction): the first is walked, the
    others are refused by the entry's budget, so sixteen cost about what one does."""
    one, parsed = _cpu_seconds(tpu_candidates(0, candidates=1, flaw="instruction"))
    assert parsed.info is None
    sixteen, parsed = _cpu_seconds(tpu_candidates(0, flaw="instruction"))
    assert sixteen < 2 * one + 0.2, (one, sixteen)
    assert parsed.info is None and parsed.why is not None and "instructions" in parsed.why


def test_a_candidate_past_the_instruction_bound_is_recorded_without_walking_it() -> None:
    """More than MAX_INSTRUCTIONS: the module and its shapes, no body, and none of it walked."""
    data = tpu_candidates(0, candidates=1, instructions=MAX_INSTRUCTIONS + 1, flaw="none")
    seconds, parsed = _cpu_seconds(data)
    assert parsed.info is not None and parsed.info.module == "jit_probe0" and parsed.info.body is None
    walked, _ = _cpu_seconds(tpu_candidates(0, candidates=1, instructions=MAX_INSTRUCTIONS, flaw="none"))
    assert seconds < walked / 3, (seconds, walked)
