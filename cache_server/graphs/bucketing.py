"""Which dimensions of a graph vary across its shape variants, and what padding them to buckets would save.

A graph (an HLO module in a namespace) compiled at many input shapes has one stored variant per shape. For
its variants' signatures (:func:`~cache_server.graphs.shapes.parse_signature`) :func:`analyse` finds the
parameter dimensions whose size differs between variants, what sizes they took, and for each padding
scheme of :data:`SCHEMES` (every varying dimension padded up to its bucket):

- ``variants``: how many distinct compilations would be left (distinct parameter shapes after padding);
- ``mean_overhead``: the padding's cost, as the mean over the variants of *extra elements / real
  elements*, counting the elements of the parameters that have a varying dimension (the constant
  parameters, such as weights, are not padded, so they are left out of both sides); a variant whose
  varying parameters hold no element (a dimension of size 0) costs 0; ``max_overhead`` the largest.

A size of 0 stays 0 in every scheme (an empty dimension needs no padding). Variants that differ from the
most common layout in more than sizes (another number of parameters, element type or rank) are not
comparable dimension by dimension: they are counted in ``other_layouts`` and each stays one compilation
after bucketing. Pure functions: no I/O, no index.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cache_server.graphs.shapes import Signature

__all__ = [
    "SCHEMES",
    "VALUES_SHOWN",
    "BucketingReport",
    "Scheme",
    "SchemeOutcome",
    "VaryingDimension",
    "analyse",
    "multiple_of",
    "next_power_of_two",
]

VALUES_SHOWN = 32  # distinct sizes listed per varying dimension (the count, min and max cover them all)


def next_power_of_two(size: int) -> int:
    """The smallest power of two at least ``size`` (0 stays 0)."""
    return 0 if size <= 0 else 1 << (size - 1).bit_length()


def multiple_of(step: int) -> Callable[[int], int]:
    """Rounding up to a multiple of ``step`` (0 stays 0)."""

    def padded(size: int) -> int:
        return 0 if size <= 0 else -(-size // step) * step

    return padded


@dataclass(frozen=True)
class Scheme:
    """A padding scheme: its short name (``pow2``), what it does in words, and the padding itself."""

    name: str
    description: str
    pad: Callable[[int], int]


SCHEMES: tuple[Scheme, ...] = (
    Scheme("pow2", "next power of two", next_power_of_two),
    Scheme("mult8", "next multiple of 8", multiple_of(8)),
    Scheme("mult64", "next multiple of 64", multiple_of(64)),
    Scheme("mult128", "next multiple of 128", multiple_of(128)),
)


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
class SchemeOutcome:
    """What one padding scheme leaves: compilations, and the padding's mean and largest overhead."""

    scheme: str
    description: str
    variants: int
    mean_overhead: float
    max_overhead: float


@dataclass(frozen=True)
class BucketingReport:
    """One graph's variants analysed: how many, the varying dimensions, and each scheme's outcome."""

    variants: int
    other_layouts: int
    varying: tuple[VaryingDimension, ...]
    schemes: tuple[SchemeOutcome, ...]


_Dims = tuple[tuple[int, ...], ...]  # a variant's parameter sizes, parameter by parameter


@dataclass(frozen=True)
class _Sizes:
    """The variants reduced to what the schemes need, worked out once for all of them: each variant's sizes
    of the varying dimensions (``keys``) and its elements in the parameters that have one (``real``); each
    such parameter as the product of its fixed dimensions and the places of its varying ones in a key (a
    dimension that does not vary has one size in every variant of the layout)."""

    keys: list[tuple[int, ...]]
    real: list[int]
    params: list[tuple[int, tuple[int, ...]]]


def _sizes(variants: list[_Dims], varying: Sequence[tuple[int, int]]) -> _Sizes:
    params: list[tuple[int, tuple[int, ...]]] = []
    for param in dict.fromkeys(p for p, _ in varying):
        places = tuple(i for i, (p, _) in enumerate(varying) if p == param)
        fixed = {d for p, d in varying if p == param}
        params.append((math.prod(s for d, s in enumerate(variants[0][param]) if d not in fixed), places))
    keys = [tuple([dims[p][d] for p, d in varying]) for dims in variants]
    real = [sum(c * math.prod([key[i] for i in places]) for c, places in params) for key in keys]
    return _Sizes(keys, real, params)


def _outcome(scheme: Scheme, sizes: _Sizes, others: int) -> SchemeOutcome:
    # each size padded once (a graph has thousands of variants and few distinct sizes)
    padded_size = {size: scheme.pad(size) for size in {size for key in sizes.keys for size in key}}
    buckets: set[tuple[int, ...]] = set()
    overheads: list[float] = []
    params = sizes.params
    for key, real in zip(sizes.keys, sizes.real, strict=True):
        padded_key = tuple([padded_size[size] for size in key])
        buckets.add(padded_key)
        if real:
            padded = sum(c * math.prod([padded_key[i] for i in places]) for c, places in params)
            overheads.append((padded - real) / real)
        else:
            overheads.append(0.0)
    return SchemeOutcome(
        scheme=scheme.name,
        description=scheme.description,
        variants=len(buckets) + others,
        mean_overhead=math.fsum(overheads) / len(overheads) if overheads else 0.0,
        max_overhead=max(overheads, default=0.0),
    )


def analyse(
    signatures: Sequence[Signature], *, schemes: Sequence[Scheme] = SCHEMES, values_shown: int = VALUES_SHOWN
) -> BucketingReport:
    """The varying dimensions of one graph's variants and what each padding scheme would leave.

    ``signatures`` are the graph's variants, one per distinct shape (repeats of a parameter shape count
    once). Only the variants of the most common layout are compared (the rest: ``other_layouts``).
    """
    # plain tuples, not the Shape objects: hashed in C (a graph may have thousands of variants)
    distinct = list(
        dict.fromkeys(tuple((p.element, p.dims, p.dynamic) for p in s.params) for s in signatures)
    )
    if not distinct:
        return BucketingReport(0, 0, (), tuple(_outcome(s, _Sizes([], [], []), 0) for s in schemes))
    layouts = [tuple((element, len(dims)) for element, dims, _ in params) for params in distinct]
    common = Counter(layouts).most_common(1)[0][0]
    variants: list[_Dims] = [
        tuple(dims for _, dims, _ in params)
        for params, layout in zip(distinct, layouts, strict=True)
        if layout == common
    ]
    others = len(distinct) - len(variants)
    found: list[VaryingDimension] = []
    for param, (_, rank) in enumerate(common):
        for dim in range(rank):
            sizes = sorted({dims[param][dim] for dims in variants})
            if len(sizes) > 1:
                found.append(
                    VaryingDimension(param, dim, len(sizes), sizes[0], sizes[-1], tuple(sizes[:values_shown]))
                )
    reduced = _sizes(variants, [(v.param, v.dim) for v in found])
    return BucketingReport(
        variants=len(distinct),
        other_layouts=others,
        varying=tuple(found),
        schemes=tuple(_outcome(scheme, reduced, others) for scheme in schemes),
    )
