"""Bucketing advice for parameter shapes: :func:`analyse` over a graph's variants, with the generic axis
analysis of :mod:`.axes`.

:func:`analyse` is the wrapper for parameter shapes (:func:`~.shapes.parse_shape_signature`):
its axes are the parameter dimensions that vary within the most common layout (element types and ranks),
its cost the **bytes of the padded parameters** (those with a varying dimension; the others, such as
weights, are not padded and are left out of both sides), each variant weighing what the caller says (the
report: its entries' hits + 1; by default 1). Where every result dimension is, in every variant, a
constant plus a sum of varying dimensions, the **bytes of the padded results** are a second measure
(``also_*`` overheads). Variants of another layout (another parameter count, element type or rank) and
variants that repeat another's parameters with another result cannot be merged by padding: each stays one
compilation (``other_layouts``, ``result_only``). When no parameter dimension varies, no scheme is
offered and ``unchanged`` says what differs instead. A size of 0 stays 0 under the power-of-two and
multiple roundings (an empty dimension needs no padding); the maximum and bucket boundaries pad it too.
Pure functions: no I/O, no index.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cache_server.graphs.axes import (
    SCHEMES,
    VALUES_SHOWN,
    WEIGHTS,
    AxesReport,
    AxisChoice,
    Combination,
    Point,
    Scheme,
    SchemeOutcome,
    analyse_axes,
    element_bytes,
)
from cache_server.graphs.shapes import ShapeSignature, parse_arrays

__all__ = [
    "COST_PARAMETERS",
    "COST_RESULTS",
    "AxisChoice",
    "BucketingReport",
    "Combination",
    "VaryingDimension",
    "analyse",
]

COST_PARAMETERS = "bytes of the padded parameters"
COST_RESULTS = "bytes of the padded results"
RESULT_AXES = 4  # a result's dimensions are matched to sums of at most this many varying dimensions
WEIGHTS_HITS = "its entries' hits + 1 per variant"


@dataclass(frozen=True)
class VaryingDimension:
    """Dimension ``dim`` of parameter ``param`` (both from 0): the distinct sizes it took across the
    variants (``count`` of them, the smallest :data:`VALUES_SHOWN` in ``values``), from ``min`` to ``max``."""

    param: int
    dim: int
    count: int
    min: int
    max: int
    values: tuple[int, ...]

    @property
    def label(self) -> str:
        """``p0.d1``: parameter 0, dimension 1."""
        return f"p{self.param}.d{self.dim}"


@dataclass(frozen=True)
class BucketingReport:
    """One graph's variants analysed: how many (distinct signatures, results included), those of another
    layout and those differing from another only in the result (each one compilation whatever the padding),
    the varying dimensions, each scheme applied to all of them (``schemes``), the per-dimension analysis
    (``axes``: choices and frontier; None when nothing varies) and, when nothing varies, what differs."""

    variants: int
    other_layouts: int
    varying: tuple[VaryingDimension, ...]
    schemes: tuple[SchemeOutcome, ...]
    axes: AxesReport | None = None
    result_only: int = 0
    unchanged: str | None = None


_Dims = tuple[tuple[int, ...], ...]  # a variant's parameter sizes, parameter by parameter
# a variant as plain tuples: each parameter's element type, sizes and dynamic flags; the result's text
_Variant = tuple[tuple[tuple[str, tuple[int, ...], tuple[bool, ...]], ...], str]


def _parameter_cost(
    first: _Dims, elements: Sequence[str], varying: Sequence[tuple[int, int]]
) -> Callable[[tuple[int, ...]], float]:
    """Bytes of the parameters that have a varying dimension, at a point's sizes of those dimensions."""
    params: list[tuple[int, tuple[int, ...]]] = []
    for param in dict.fromkeys(p for p, _ in varying):
        places = tuple(i for i, (p, _) in enumerate(varying) if p == param)
        fixed = {d for p, d in varying if p == param}
        constant = math.prod(s for d, s in enumerate(first[param]) if d not in fixed)
        params.append((element_bytes(elements[param]) * constant, places))

    single = [(c, places[0]) for c, places in params if len(places) == 1]
    multi = [(c, places) for c, places in params if len(places) > 1]
    if not multi and len(single) == 1:
        ((c0, i0),) = single
        return lambda key: float(c0 * key[i0])
    if not multi and len(single) == 2:
        (c0, i0), (c1, i1) = single
        return lambda key: float(c0 * key[i0] + c1 * key[i1])

    def cost(key: tuple[int, ...]) -> float:
        total = sum([c * key[i] for c, i in single])
        for c, places in multi:
            total += c * math.prod([key[i] for i in places])
        return float(total)

    return cost


def _result_cost(
    results: Sequence[str], keys: Sequence[tuple[int, ...]]
) -> Callable[[tuple[int, ...]], float] | None:
    """Bytes of the results at a point's sizes, when every result dimension is, in every variant, a
    constant plus the sum of some of the varying dimensions (``f32[rows+tokens,32]``: as the parameters
    pad, so does it); None when the results do not all have one layout, a dimension follows no such sum, or
    none follows a varying dimension (then the results never pad)."""
    arrays = [parse_arrays(text) for text in results]
    layout = [(a.element, len(a.dims)) for a in arrays[0]]
    n = len(keys[0])
    if (
        not layout
        or n > RESULT_AXES
        or any([(a.element, len(a.dims)) for a in found] != layout for found in arrays)
    ):
        return None
    subsets = [group for size in range(n + 1) for group in itertools.combinations(range(n), size)]
    terms: list[tuple[int, list[tuple[int, tuple[int, ...]]]]] = []
    for index, (element, rank) in enumerate(layout):
        formula: list[tuple[int, tuple[int, ...]]] = []
        for dim in range(rank):
            values = [found[index].dims[dim] for found in arrays]
            for group in subsets:
                constant = values[0] - sum(keys[0][a] for a in group)
                if all(v - sum([k[a] for a in group]) == constant for v, k in zip(values, keys, strict=True)):
                    formula.append((constant, group))
                    break
            else:
                return None
        terms.append((element_bytes(element), formula))
    if not any(group for _, formula in terms for _, group in formula):
        return None  # the results do not change with the sizes: nothing of theirs pads

    def cost(key: tuple[int, ...]) -> float:
        return float(
            sum(
                size * math.prod([c + sum([key[a] for a in group]) for c, group in formula])
                for size, formula in terms
            )
        )

    return cost


def _what_differs(distinct: Sequence[_Variant]) -> str:
    params = {p for p, _ in distinct}
    parts = []
    if len({len(p) for p in params}) > 1:
        parts.append("parameter count")
    if len({tuple(e for e, _, _ in p) for p in params}) > 1:
        parts.append("element types")
    if len({tuple(len(d) for _, d, _ in p) for p in params}) > 1:
        parts.append("ranks")
    if len(params) > 1 and not parts:
        parts.append("dynamic bounds")
    if len({r for _, r in distinct}) > 1:
        parts.append("result shape" if len(params) > 1 else "result shape only")
    what = ", ".join(parts) if parts else "nothing in the shapes"
    return f"no input dimension varies: padding cannot merge these variants (they differ in: {what})"


def analyse(
    signatures: Sequence[ShapeSignature],
    *,
    weights: Sequence[float] | None = None,
    schemes: Sequence[Scheme] = SCHEMES,
    values_shown: int = VALUES_SHOWN,
) -> BucketingReport:
    """The varying dimensions of one graph's variants, the per-dimension choices and their combinations
    (:func:`analyse_axes`, the cost in bytes of the padded parameters), and each scheme applied to all.

    ``signatures`` are the graph's variants (repeats count once), ``weights`` how often each is used (the
    report passes its entries' hits + 1; repeats add up; None: 1 each). Only the variants of the most
    common layout are compared (the rest: ``other_layouts``, one compilation each).
    """
    # plain tuples, not the Shape objects: hashed in C (a graph may have thousands of variants)
    keys = [(tuple((p.element, p.dims, p.dynamic) for p in s.params), s.result) for s in signatures]
    weight_of: dict[_Variant, float] = {}
    for key, weight in zip(keys, weights if weights is not None else [1.0] * len(keys), strict=True):
        weight_of[key] = weight_of.get(key, 0.0) + weight
    distinct = list(weight_of)
    if not distinct:
        return BucketingReport(0, 0, (), ())
    layouts = [tuple((element, len(dims)) for element, dims, _ in params) for params, _ in distinct]
    common = Counter(layouts).most_common(1)[0][0]
    in_common = [
        (tuple(dims for _, dims, _ in params), weight_of[(params, result)])
        for (params, result), layout in zip(distinct, layouts, strict=True)
        if layout == common
    ]
    point_weight: dict[_Dims, float] = {}
    result_of: dict[_Dims, str] = {}
    for (dims, weight), (_, result) in zip(
        in_common, [v for v, layout in zip(distinct, layouts, strict=True) if layout == common], strict=True
    ):
        point_weight[dims] = point_weight.get(dims, 0.0) + weight
        result_of.setdefault(dims, result)
    variants: list[_Dims] = list(point_weight)
    others = len(distinct) - len(in_common)
    result_only = len(in_common) - len(variants)
    found: list[VaryingDimension] = []
    for param, (_, rank) in enumerate(common):
        for dim in range(rank):
            sizes = sorted({dims[param][dim] for dims in variants})
            if len(sizes) > 1:
                found.append(
                    VaryingDimension(param, dim, len(sizes), sizes[0], sizes[-1], tuple(sizes[:values_shown]))
                )
    if not found:
        return BucketingReport(
            variants=len(distinct),
            other_layouts=others,
            varying=(),
            schemes=(),
            axes=None,
            result_only=result_only,
            unchanged=_what_differs(distinct) if len(distinct) > 1 else None,
        )
    places = [(v.param, v.dim) for v in found]
    cost = _parameter_cost(variants[0], [e for e, _ in common], places)
    points = [Point(tuple([dims[p][d] for p, d in places]), point_weight[dims]) for dims in variants]
    separate = others + result_only
    results = _result_cost([result_of[dims] for dims in variants], [p.sizes for p in points])
    axes = analyse_axes(
        [v.label for v in found],
        points,
        cost,
        separate=separate,
        cost_label=COST_PARAMETERS,
        weights_label=WEIGHTS if weights is None else WEIGHTS_HITS,
        values_shown=values_shown,
        uniform=schemes,
        also=(COST_RESULTS, results) if results is not None else None,
    )
    return BucketingReport(
        variants=len(distinct),
        other_layouts=others,
        varying=tuple(found),
        schemes=axes.uniform,
        axes=axes,
        result_only=result_only,
    )
