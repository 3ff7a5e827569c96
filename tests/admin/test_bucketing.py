"""The bucketing report's arithmetic on small graphs worked out by hand (cache_server.graphs.bucketing)."""

from __future__ import annotations

import pytest

from cache_server.graphs.bucketing import (
    VaryingDimension,
    analyse,
    multiple_of,
    next_power_of_two,
)
from cache_server.graphs.report import shares
from cache_server.graphs.shapes import Signature, parse_signature


def signatures(*texts: str) -> list[Signature]:
    parsed = [parse_signature(text) for text in texts]
    assert all(p is not None for p in parsed)
    return [p for p in parsed if p is not None]


# Parameter 0 has 4 or 12 rows, parameter 1 has 3, 4 or 9 tokens, parameter 2 (a weight) never changes.
FOUR = signatures(
    "(f32[4,16], s64[3], f32[7]) -> (f32[4])",
    "(f32[12,16], s64[3], f32[7]) -> (f32[4])",
    "(f32[12,16], s64[4], f32[7]) -> (f32[4])",
    "(f32[4,16], s64[9], f32[7]) -> (f32[4])",
)


def test_paddings_round_up_and_leave_zero_alone() -> None:
    assert [next_power_of_two(n) for n in (0, 1, 2, 3, 4, 5, 64, 65)] == [0, 1, 2, 4, 4, 8, 64, 128]
    eight = multiple_of(8)
    assert [eight(n) for n in (0, 1, 8, 9, 120, 121)] == [0, 8, 8, 16, 120, 128]


def test_varying_dimensions_are_named_with_their_sizes() -> None:
    report = analyse(FOUR)
    assert report.variants == 4 and report.other_layouts == 0
    assert report.varying == (
        VaryingDimension(param=0, dim=0, count=2, min=4, max=12, values=(4, 12)),
        VaryingDimension(param=1, dim=0, count=3, min=3, max=9, values=(3, 4, 9)),
    )
    assert [v.label for v in report.varying] == ["p0.d0", "p1.d0"]


def test_each_scheme_counts_the_compilations_left_and_the_padding() -> None:
    by_name = {outcome.scheme: outcome for outcome in analyse(FOUR).schemes}
    assert list(by_name) == ["pow2", "mult8", "mult64", "mult128"]
    # pow2: (4,4) (16,4) (16,4) (4,16); mult8: (8,8) (16,8) (16,8) (8,16); 64 and 128: one bucket
    assert {name: o.variants for name, o in by_name.items()} == {
        "pow2": 3,
        "mult8": 3,
        "mult64": 1,
        "mult128": 1,
    }
    # pow2: extra elements / real elements of parameters 0 and 1 (the weight is left out), per variant
    pow2 = [(64 + 4 - 67) / 67, (256 + 4 - 195) / 195, (256 + 4 - 196) / 196, (64 + 16 - 73) / 73]
    assert by_name["pow2"].mean_overhead == pytest.approx(sum(pow2) / 4)
    assert by_name["pow2"].max_overhead == pytest.approx(65 / 195)
    mult64 = [(64 * 16 + 64 - real) / real for real in (67, 195, 196, 73)]
    assert by_name["mult64"].mean_overhead == pytest.approx(sum(mult64) / 4)


def test_an_empty_dimension_stays_empty_and_costs_nothing() -> None:
    report = analyse(signatures("(f32[0,8], s64[0]) -> (f32[1])", "(f32[3,8], s64[0]) -> (f32[1])"))
    assert [v.label for v in report.varying] == ["p0.d0"]
    pow2 = report.schemes[0]
    assert pow2.variants == 2  # 0 and 4 rows
    assert pow2.mean_overhead == pytest.approx((0 + (4 * 8 - 24) / 24) / 2)


def test_other_layouts_are_counted_apart_and_never_merged() -> None:
    report = analyse(
        signatures(
            "(f32[5,8]) -> (f32[1])",
            "(f32[6,8]) -> (f32[1])",
            "(f32[7,8]) -> (f32[1])",
            "(bf16[5,8]) -> (f32[1])",  # another element type
            "(f32[5,8], f32[2]) -> (f32[1])",  # another parameter count
        )
    )
    assert (report.variants, report.other_layouts) == (5, 2)
    assert [(v.label, v.values) for v in report.varying] == [("p0.d0", (5, 6, 7))]
    assert [o.variants for o in report.schemes] == [1 + 2, 1 + 2, 1 + 2, 1 + 2]


def test_repeated_shapes_count_once_and_values_are_capped() -> None:
    texts = [f"(f32[{n}]) -> (f32[1])" for n in range(1, 41)]
    report = analyse(signatures(*texts, *texts[:5]), values_shown=4)
    assert report.variants == 40
    (rows,) = report.varying
    assert (rows.count, rows.min, rows.max, rows.values) == (40, 1, 40, (1, 2, 3, 4))
    assert {o.scheme: o.variants for o in report.schemes} == {
        "pow2": 7,
        "mult8": 5,
        "mult64": 1,
        "mult128": 1,
    }


def test_no_variants_or_one_variant_vary_nothing() -> None:
    assert analyse([]).variants == 0
    single = analyse(signatures("(f32[3,3]) -> (f32[3])"))
    assert single.varying == ()
    assert [(o.variants, o.mean_overhead) for o in single.schemes] == [(1, 0.0)] * 4


def test_a_report_shares_the_variants_it_reads() -> None:
    # graphs that fit are read whole; what a small graph leaves goes to the larger ones
    assert shares([2112, 100, 100], per_graph=2500, total=4000) == [2112, 100, 100]
    assert shares([10_000] * 10, per_graph=2500, total=4000) == [400] * 10
    assert shares([10_000, 3000, 100], per_graph=2500, total=4000) == [1950, 1950, 100]
    assert shares([10_000, 10_000], per_graph=5000, total=4000) == [2500, 2500]  # the request's cap, if more
    assert shares([10_000], per_graph=5000, total=4000) == [5000]
    assert shares([], per_graph=5, total=4) == []
