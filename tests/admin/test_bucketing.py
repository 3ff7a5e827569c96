"""The bucketing report's arithmetic on small graphs worked out by hand (cache_server.graphs.bucketing)."""

from __future__ import annotations

import itertools

import pytest

from cache_server.graphs.axes import Point, analyse_axes
from cache_server.graphs.bucketing import VaryingDimension, analyse
from cache_server.graphs.padding import best_boundaries, multiple_of, next_power_of_two
from cache_server.graphs.report import shares
from cache_server.graphs.shapes import ShapeSignature, parse_shape_signature


def signatures(*texts: str) -> list[ShapeSignature]:
    parsed = [parse_shape_signature(text) for text in texts]
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
    # pow2: extra bytes / real bytes of parameters 0 (f32: 64 bytes a row) and 1 (s64: 8 bytes a token), the
    # weight left out, per variant
    real = [64 * 4 + 8 * 3, 64 * 12 + 8 * 3, 64 * 12 + 8 * 4, 64 * 4 + 8 * 9]
    padded = [64 * 4 + 8 * 4, 64 * 16 + 8 * 4, 64 * 16 + 8 * 4, 64 * 4 + 8 * 16]
    pow2 = [(p - r) / r for p, r in zip(padded, real, strict=True)]
    assert by_name["pow2"].mean_overhead == pytest.approx(sum(pow2) / 4)
    assert by_name["pow2"].max_overhead == pytest.approx(max(pow2))
    mult64 = [(64 * 64 + 8 * 64 - r) / r for r in real]
    assert by_name["mult64"].mean_overhead == pytest.approx(sum(mult64) / 4)


def test_an_empty_dimension_stays_empty_and_costs_nothing() -> None:
    report = analyse(signatures("(f32[0,8], s64[0]) -> (f32[1])", "(f32[3,8], s64[0]) -> (f32[1])"))
    assert [v.label for v in report.varying] == ["p0.d0"]
    pow2 = report.schemes[0]
    assert pow2.variants == 2  # 0 and 4 rows
    assert pow2.mean_overhead == pytest.approx((0 + (4 * 32 - 3 * 32) / (3 * 32)) / 2)


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
    assert single.varying == () and single.schemes == () and single.axes is None
    assert single.unchanged is None  # one variant: nothing to explain


def test_nothing_varies_claims_no_saving_and_says_what_differs() -> None:
    # as a JAX broadcast_in_dim: the same input broadcast to other result shapes, or other ranks or types
    results = analyse(signatures(*(f"(f32[3]) -> (f32[{n},3])" for n in range(2, 13))))
    assert (results.variants, results.result_only, results.schemes, results.axes) == (11, 10, (), None)
    assert results.unchanged is not None
    assert results.unchanged.startswith("no input dimension varies: padding cannot merge these variants")
    assert "result shape only" in results.unchanged
    mixed = analyse(
        signatures("(f32[3]) -> (f32[3,3])", "(f32[3,1]) -> (f32[3,3])", "(bf16[3]) -> (bf16[3,3])")
    )
    assert mixed.schemes == () and mixed.axes is None and mixed.other_layouts == 2
    assert mixed.unchanged is not None and "element types" in mixed.unchanged and "ranks" in mixed.unchanged


def test_best_boundaries_minimise_the_weighted_padded_size() -> None:

    sizes, weights = [3, 5, 9, 10, 17, 30, 31, 64], [5, 1, 1, 7, 2, 1, 4, 1]

    def padded(tops: tuple[int, ...]) -> float:
        return sum(w * min(t for t in tops if t >= s) for s, w in zip(sizes, weights, strict=True))

    for k in (1, 2, 3, 4):
        tops = best_boundaries(sizes, weights, k)
        assert tops[-1] == 64 and len(tops) <= k and set(tops) <= set(sizes)
        brute = min(padded((*c, 64)) for c in itertools.combinations(sizes[:-1], k - 1))
        assert padded(tops) == brute
    assert best_boundaries(sizes, weights, 8) == tuple(sizes)


# The user's trial: text lengths 24..390 (30 values) and image tokens 0..144 in steps of 16 (10 values),
# every pair compiled. Text: s32 ids (4 bytes a token); images: f32 rows of 128 (512 bytes a row).
TEXT = [24, *range(65, 65 + 11 * 28, 11), 390]
IMAGES = list(range(0, 145, 16))
TEXT_IMAGE = signatures(*(f"(s32[{t}], f32[{r},128]) -> (f32[{t + r},128])" for t in TEXT for r in IMAGES))


def text_image_bytes(text: int, rows: int) -> int:
    return 4 * text + 512 * rows


def test_per_dimension_choices_give_the_counts_worked_out_by_hand() -> None:
    assert (len(TEXT), TEXT[0], TEXT[-1], len(IMAGES)) == (30, 24, 390, 10)
    report = analyse(TEXT_IMAGE)
    assert report.axes is not None and report.axes.cost == "bytes of the padded parameters"
    text, images = report.axes.axes
    assert (text.label, text.count, images.label, images.count) == ("p0.d0", 30, "p1.d0", 10)
    by_name = {c.name: c for c in text.choices}
    assert by_name["as is"].compiles == 300
    # text to multiples of 64, images as they are: 64, 128, ..., 448: 7 text sizes, 70 compilations
    mult64 = by_name["mult64"]
    assert (mult64.sizes, mult64.compiles) == (7, 70)
    # text to powers of two: 32, 128, 256, 512 (no text between 33 and 64): 40 compilations
    assert (by_name["pow2"].sizes, by_name["pow2"].compiles) == (4, 40)
    assert (by_name["max"].sizes, by_name["max"].compiles, by_name["max"].boundaries) == (1, 10, (390,))
    # overheads in bytes of the padded parameters, each variant weighing 1
    pad64 = multiple_of(64)
    ratios = [
        (text_image_bytes(pad64(t), r) - text_image_bytes(t, r)) / text_image_bytes(t, r)
        for t in TEXT
        for r in IMAGES
    ]
    assert mult64.mean_overhead == pytest.approx(sum(ratios) / len(ratios))
    assert mult64.max_overhead == pytest.approx(max(ratios)) == pytest.approx((64 - 24) / 24)
    # the best 4 boundaries for text beat pow2's 4 sizes
    assert by_name["buckets4"].sizes == 4 and by_name["buckets4"].boundaries[-1] == 390
    assert by_name["buckets4"].mean_overhead <= by_name["pow2"].mean_overhead
    # both padded to their maximum: one compilation
    frontier = report.axes.frontier
    assert frontier[0].choices == ("max", "max") and frontier[0].compiles == 1
    worst = max(
        (text_image_bytes(390, 144) - text_image_bytes(t, r)) / text_image_bytes(t, r)
        for t in TEXT
        for r in IMAGES
    )
    assert frontier[0].max_overhead == pytest.approx(worst)
    assert frontier[-1].choices == ("as is", "as is") and frontier[-1].compiles == 300
    assert len(frontier) <= 6
    # Pareto: fewer compilations cost more padding
    assert all(
        a.compiles < b.compiles and a.mean_overhead > b.mean_overhead for a, b in itertools.pairwise(frontier)
    )
    # the old rule for every dimension at once is still reported, in bytes now
    assert {s.scheme: s.variants for s in report.schemes} == {
        "pow2": 24,
        "mult8": 300,
        "mult64": 28,
        "mult128": 12,
    }


def test_the_core_takes_any_axes_points_weights_and_cost() -> None:
    # an internal size (say, a slice's length baked in as a constant) and weights: the choices weigh them
    points = [Point((size,), weight) for size, weight in ((10, 100.0), (11, 1.0), (12, 1.0), (100, 1.0))]
    report = analyse_axes(
        ["slice.3 (model.py:42)"], points, lambda key: 2.0 * key[0], cost_label="bytes of x"
    )
    (axis,) = report.axes
    assert axis.label == "slice.3 (model.py:42)" and axis.count == 4 and report.cost == "bytes of x"
    two = next(c for c in axis.choices if c.name == "buckets2")
    # 10 is the common size: it keeps its own bucket, the rare 11 and 12 pad to 100 (weighted padded size
    # 100 * 10 + 3 * 100 = 1,300, against 100 * 12 + 12 + 12 + 100 = 1,324 for (12, 100))
    assert two.boundaries == (10, 100)
    assert two.compiles == 2
    total = 103.0
    assert two.mean_overhead == pytest.approx((89 / 11 + 88 / 12) / total)
    top = next(c for c in axis.choices if c.name == "max")
    assert top.mean_overhead == pytest.approx((100 * 9 + 1 * (89 / 11) + 1 * (88 / 12)) / total)
    assert report.frontier[0].compiles == 1 and report.frontier[-1].compiles == 4
    # compilations padding cannot merge are counted in every line
    assert analyse_axes(["a"], points, lambda key: float(key[0]), separate=3).frontier[0].compiles == 4


def test_a_report_shares_the_variants_it_reads() -> None:
    # graphs that fit are read whole; what a small graph leaves goes to the larger ones
    assert shares([2112, 100, 100], per_graph=2500, total=4000) == [2112, 100, 100]
    assert shares([10_000] * 10, per_graph=2500, total=4000) == [400] * 10
    assert shares([10_000, 3000, 100], per_graph=2500, total=4000) == [1950, 1950, 100]
    assert shares([10_000, 10_000], per_graph=5000, total=4000) == [2500, 2500]  # the request's cap, if more
    assert shares([10_000], per_graph=5000, total=4000) == [5000]
    assert shares([], per_graph=5, total=4) == []


def test_weights_add_up_over_repeats_and_weigh_the_mean() -> None:
    texts = ["(f32[3]) -> (f32[1])", "(f32[5]) -> (f32[1])", "(f32[3]) -> (f32[1])"]
    report = analyse(signatures(*texts), weights=[1.0, 2.0, 5.0])
    assert report.axes is not None and report.axes.weights == "its entries' hits + 1 per variant"
    top = next(c for c in report.axes.axes[0].choices if c.name == "max")
    assert top.mean_overhead == pytest.approx(6 * (2 / 3) / 8)  # 3 pads to 5, weight 1 + 5; 5 weighs 2
    assert analyse(signatures(*texts)).axes.weights == "1 per variant"  # type: ignore[union-attr]


def test_results_that_follow_the_sizes_are_measured_too() -> None:
    # the text/image step's result f32[tokens + rows, 128]: each text id becomes a 512-byte row
    report = analyse(TEXT_IMAGE)
    assert report.axes is not None and report.axes.also_cost == "bytes of the padded results"
    mult64 = next(c for c in report.axes.axes[0].choices if c.name == "mult64")
    pad64 = multiple_of(64)
    ratios = [(pad64(t) - t) / (t + r) for t in TEXT for r in IMAGES]  # 512 bytes a row on both sides
    assert mult64.also_mean_overhead == pytest.approx(sum(ratios) / len(ratios))
    assert mult64.also_max_overhead == pytest.approx(max(ratios))
    everything = report.axes.frontier[0]
    assert everything.also_mean_overhead == pytest.approx(
        sum((390 + 144 - t - r) / (t + r) for t in TEXT for r in IMAGES) / 300
    )
    # results that never change do not pad: no second measure
    assert analyse(FOUR).axes.also_cost is None  # type: ignore[union-attr]
    # nor results whose sizes follow no sum of the varying dimensions
    odd = analyse(signatures(*(f"(f32[{n}]) -> (f32[{n * n}])" for n in (2, 3, 5))))
    assert odd.axes is not None and odd.axes.also_cost is None
    assert all(c.also_mean_overhead is None for c in odd.axes.axes[0].choices)


def test_many_axes_stay_bounded_and_no_points_give_nothing() -> None:
    import random

    rnd = random.Random(7)
    labels = [f"a{i}" for i in range(7)]
    points = [Point(tuple(rnd.randint(1, 40) for _ in labels)) for _ in range(300)]
    report = analyse_axes(labels, points, lambda key: float(sum(key)))
    frontier = report.frontier
    assert frontier[0].choices == ("max",) * 7 and frontier[0].compiles == 1
    assert frontier[-1].choices == ("as is",) * 7 and frontier[-1].compiles == len({p.sizes for p in points})
    assert 2 <= len(frontier) <= 6
    empty = analyse_axes(["a"], [], lambda key: 1.0)
    assert (empty.axes, empty.frontier, empty.points) == ((), (), 0)
