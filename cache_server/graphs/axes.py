"""Which sizes vary across a graph's shape variants, and how to pad them to buckets: per axis, and combined.

A graph (an HLO module in a namespace) compiled at many input shapes has one stored variant per shape.
The analysis core, :func:`analyse_axes`, is generic over **axes**: an axis is a named size that varies
between the variants (``p0.d1``: parameter 0, dimension 1; or a size baked into the HLO, such as
``slice.3 (model.py:42)``), a **point** is one variant (its size on each axis, and a weight: how often it
is used), and a **cost** function gives the bytes a point costs once padded. For each axis it works out the
choices (:class:`AxisChoice`: as is, next power of two, next multiple of 8, 64 or 128 where that merges
sizes, the best 2, 4 or 8 bucket boundaries for the sizes and weights seen, pad to the maximum), each with
the distinct sizes it leaves on that axis and its overhead; then the combinations of choices over the axes
that trade compilations against padding best (:class:`Combination`, a short Pareto frontier: the fewest
compilations for a padding budget), always with the as-is baseline and "all to the maximum".

Overhead: over the points, ``(cost(padded) - cost(real)) / cost(real)`` (a point of cost 0 costs 0),
weighted by the points' weights (``mean_overhead``), and the largest (``max_overhead``). Compilations: the
distinct padded points, plus ``separate`` (those padding cannot merge). The best K boundaries minimise the
weighted padded size on their axis, ``sum(weight * top(size))``.

:mod:`.bucketing` applies it to parameter shapes. Pure functions: no I/O, no index.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from cache_server.graphs.padding import (
    boundaries_for,
    multiple_of,
    next_power_of_two,
    pad_to,
)
from cache_server.parsing.schema import ELEMENT_BYTES

__all__ = [
    "BUCKET_COUNTS",
    "ELEMENT_BYTES",
    "FRONTIER_LINES",
    "SCHEMES",
    "VALUES_SHOWN",
    "WEIGHTS",
    "AxesReport",
    "AxisChoice",
    "AxisReport",
    "Combination",
    "Point",
    "Scheme",
    "SchemeOutcome",
    "analyse_axes",
    "element_bytes",
]

VALUES_SHOWN = 32  # distinct sizes listed per varying dimension (the count, min and max cover them all)
BUCKET_COUNTS = (2, 4, 8)  # the "best K boundaries" choices offered per axis
FRONTIER_LINES = 6  # combinations shown at most
MAX_COMBINATIONS = 24  # combinations of per-axis choices evaluated at most (beyond: fewer choices per axis)
WEIGHTS = "1 per variant"


def element_bytes(element: str) -> int:
    """Bytes of one element of an HLO element type (``f8e4m3fn``: 1; an unknown type: 4)."""
    return ELEMENT_BYTES.get(element, 4)


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


# ---------------------------------------------------------------------------------------------------------
# The generic core


@dataclass(frozen=True)
class Point:
    """One variant: its size on each axis (in the axes' order) and its weight (how often it is used)."""

    sizes: tuple[int, ...]
    weight: float = 1.0


@dataclass(frozen=True)
class AxisChoice:
    """One way to pad one axis (the others left as they are): ``name`` (``as is``, ``pow2``, ``mult8``,
    ``mult64``, ``mult128``, ``buckets4``, ``max``), in words, the distinct sizes it leaves on the axis
    (``sizes``), the sizes padded to (``boundaries``: the K boundaries, or the maximum; empty for the
    roundings) and its overhead over the points."""

    name: str
    description: str
    sizes: int
    compiles: int
    boundaries: tuple[int, ...]
    mean_overhead: float
    max_overhead: float
    also_mean_overhead: float | None = None
    also_max_overhead: float | None = None


@dataclass(frozen=True)
class AxisReport:
    """One axis: its label, the distinct sizes it took (``count``; the smallest :data:`VALUES_SHOWN` in
    ``values``), from ``min`` to ``max``, and its choices (``as is`` first)."""

    label: str
    count: int
    min: int
    max: int
    values: tuple[int, ...]
    choices: tuple[AxisChoice, ...]


@dataclass(frozen=True)
class Combination:
    """One choice per axis (``choices[i]`` names a choice of axis ``i``), the compilations it leaves
    (distinct padded points, plus those padding cannot merge) and its overhead."""

    choices: tuple[str, ...]
    compiles: int
    mean_overhead: float
    max_overhead: float
    also_mean_overhead: float | None = None
    also_max_overhead: float | None = None

    def describe(self, labels: Sequence[str]) -> str:
        """``p0.d0 mult64, p1.d0 as is``; ``all as is``; ``all max``."""
        if len(set(self.choices)) == 1 and len(self.choices) > 1:
            return f"all {self.choices[0]}"
        return ", ".join(f"{label} {choice}" for label, choice in zip(labels, self.choices, strict=True))


@dataclass(frozen=True)
class SchemeOutcome:
    """One padding scheme applied to every axis at once: compilations left, and its overhead."""

    scheme: str
    description: str
    variants: int
    mean_overhead: float
    max_overhead: float


@dataclass(frozen=True)
class AxesReport:
    """What :func:`analyse_axes` found: the axes with their choices, the frontier of combinations (fewest
    compilations first; the last the as-is baseline), the points analysed, the compilations padding cannot
    merge (``separate``, counted in every ``compiles``), what the cost and weights measure, and the
    ``uniform`` schemes asked for (each applied to every axis at once)."""

    axes: tuple[AxisReport, ...]
    frontier: tuple[Combination, ...]
    points: int
    separate: int
    cost: str
    weights: str
    uniform: tuple[SchemeOutcome, ...] = ()
    also_cost: str | None = None


class _Evaluator:
    """Compilations and overhead of padded columns, the points' costs worked out once each."""

    def __init__(self, points: Sequence[Point], cost: Callable[[tuple[int, ...]], float], separate: int):
        self.keys = [p.sizes for p in points]
        self.cost = cost
        self.separate = separate
        self.cache: dict[tuple[int, ...], float] = {}
        real = [self._cost(key) for key in self.keys]
        total = math.fsum(p.weight for p in points) or 1.0
        self.inv = [1.0 / c if c else 0.0 for c in real]  # a point of cost 0 costs nothing
        self.winv = [p.weight / c / total if c else 0.0 for p, c in zip(points, real, strict=True)]
        self.base = math.fsum(p.weight for p, c in zip(points, real, strict=True) if c) / total

    def _cost(self, key: tuple[int, ...]) -> float:
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = float(self.cost(key))
        return found

    def __call__(self, columns: Sequence[Sequence[int]]) -> tuple[int, float, float]:
        keys = list(zip(*columns, strict=True)) if columns else self.keys
        distinct = set(keys)
        cache = self.cache
        for key in distinct.difference(cache):
            cache[key] = float(self.cost(key))
        padded = list(map(cache.__getitem__, keys))
        mean = sum(map(operator.mul, padded, self.winv)) - self.base
        worst = max(map(operator.mul, padded, self.inv), default=1.0) - 1.0
        return len(distinct) + self.separate, max(mean, 0.0), max(worst, 0.0)


def _choices(
    column: Sequence[int], weights: Sequence[float]
) -> list[tuple[str, str, Callable[[int], int], tuple[int, ...]]]:
    by_size: dict[int, float] = {}
    for size, weight in zip(column, weights, strict=True):
        by_size.setdefault(size, 0.0)
        by_size[size] += weight
    sizes = sorted(by_size)
    found: list[tuple[str, str, Callable[[int], int], tuple[int, ...]]] = [("as is", "as is", int, ())]
    top = sizes[-1]
    seen = {tuple(sizes), (top,) * len(sizes)}  # a rounding that pads all to the maximum is "max"
    for scheme in SCHEMES:
        mapped = tuple(scheme.pad(s) for s in sizes)
        if len(set(mapped)) < len(sizes) and mapped not in seen:
            seen.add(mapped)
            found.append((scheme.name, scheme.description, scheme.pad, ()))
    counts = [k for k in BUCKET_COUNTS if k < len(sizes)]
    boundaries = boundaries_for(sizes, [by_size[s] for s in sizes], counts) if counts else {}
    for k in counts:
        tops = boundaries[k]
        pad = pad_to(tops)
        mapped = tuple(pad(s) for s in sizes)
        if mapped not in seen:
            seen.add(mapped)
            found.append((f"buckets{k}", f"best {k} boundaries", pad, tops))
    found.append(("max", f"pad to the maximum ({top})", pad_to((top,)), (top,)))
    return found


def _spread(items: list[int], keep: int) -> list[int]:
    """``keep`` of ``items`` (indices), the first and the last always, the rest evenly spread."""
    if len(items) <= keep:
        return items
    picks = {round(i * (len(items) - 1) / (keep - 1)) for i in range(keep)}
    return [items[i] for i in sorted(picks)]


def _frontier(found: dict[tuple[str, ...], tuple[int, float, float]], lines: int) -> list[Combination]:
    """The Pareto-optimal combinations (fewer compilations, or less mean overhead), at most ``lines`` of
    them: all to the maximum and the as-is baseline always, the rest spread between."""
    combos = sorted(found.items(), key=lambda item: (item[1][0], item[1][1]))
    pareto: list[tuple[tuple[str, ...], tuple[int, float, float]]] = []
    for names, outcome in combos:
        if not pareto or outcome[1] < pareto[-1][1][1] - 1e-12:
            if pareto and pareto[-1][1][0] == outcome[0]:
                continue
            pareto.append((names, outcome))
    kept = [pareto[i] for i in _spread(list(range(len(pareto))), lines)]
    return [Combination(names, c, mean, worst) for names, (c, mean, worst) in kept]


def analyse_axes(
    axes: Sequence[str],
    points: Sequence[Point],
    cost: Callable[[tuple[int, ...]], float],
    *,
    separate: int = 0,
    cost_label: str = "bytes",
    weights_label: str = WEIGHTS,
    values_shown: int = VALUES_SHOWN,
    lines: int = FRONTIER_LINES,
    uniform: Sequence[Scheme] = (),
    also: tuple[str, Callable[[tuple[int, ...]], float]] | None = None,
) -> AxesReport:
    """Per-axis padding choices and the best combinations of them, for one graph.

    - ``axes``: the labels of the varying sizes (``p0.d1``, ``slice.3 (model.py:42)``), in order;
    - ``points``: the variants, each a :class:`Point` (its sizes on the axes, in that order, and its weight;
      two points may share sizes: they then pad together);
    - ``cost``: the bytes of a point at the given sizes (called with padded sizes too; each distinct tuple
      once), e.g. the bytes of the parameters or instruction results whose sizes pad;
    - ``separate``: compilations padding cannot merge (other layouts...), added to every count;
    - ``cost_label``: what ``cost`` measures, in words (reported as :attr:`AxesReport.cost`);
    - ``uniform``: schemes also applied to every axis at once (:attr:`AxesReport.uniform`);
    - ``also``: a second measure, ``(label, cost)`` (the bytes of the results, say): each choice's and
      frontier line's overhead by it too (``also_mean_overhead``, ``also_max_overhead``); the search and the
      frontier go by ``cost`` alone.

    Returns an :class:`AxesReport`: for each axis its :class:`AxisChoice` list (each alone, the other axes as
    they are), and a frontier of at most ``lines`` :class:`Combination`, fewest compilations first, the
    first all axes padded to their maximum and the last the as-is baseline. The search evaluates every
    combination of the per-axis choices that are themselves Pareto-optimal on their axis while that is at
    most :data:`MAX_COMBINATIONS`, else fewer choices per axis (as is and the maximum always kept); with
    more axes than that allows even so (over 4), greedily: the axes padded to their maximum one more at a
    time, the cheapest first. Cost:
    about ``points * (choices per axis * axes + combinations)`` cheap steps, plus ``cost`` once per distinct
    padded tuple. Axes whose size never varies may be passed; they get only ``as is`` and ``max``.
    """
    if not points:
        return AxesReport((), (), 0, separate, cost_label, weights_label)
    evaluate = _Evaluator(points, cost, separate)
    weights = [p.weight for p in points]
    columns = [[p.sizes[i] for p in points] for i in range(len(axes))]
    reports: list[AxisReport] = []
    padded_columns: list[list[tuple[str, list[int], tuple[int, float, float]]]] = []
    found: dict[tuple[str, ...], tuple[int, float, float]] = {}
    for index, (label, column) in enumerate(zip(axes, columns, strict=True)):
        options = []
        axis_choices = []
        distinct = sorted(set(column))
        for name, description, pad, boundaries in _choices(column, weights):
            mapping = {s: pad(s) for s in distinct}
            padded = [mapping[s] for s in column]
            trial = [padded if i == index else c for i, c in enumerate(columns)]
            names = tuple(name if i == index else "as is" for i in range(len(axes)))
            outcome = found.get(names) or evaluate(trial)
            found[names] = outcome
            options.append((name, padded, outcome))
            axis_choices.append(
                AxisChoice(
                    name,
                    description,
                    len(set(mapping.values())),
                    outcome[0],
                    boundaries,
                    outcome[1],
                    outcome[2],
                )
            )
        reports.append(
            AxisReport(
                label,
                len(distinct),
                distinct[0] if distinct else 0,
                distinct[-1] if distinct else 0,
                tuple(distinct[:values_shown]),
                tuple(axis_choices),
            )
        )
        padded_columns.append(options)
    # per axis, the choices Pareto-optimal on that axis (distinct sizes left against overhead)
    pruned: list[list[int]] = []
    for choices in reports:
        ranked = sorted(
            range(len(choices.choices)),
            key=lambda i: (choices.choices[i].sizes, choices.choices[i].mean_overhead),
        )
        keep: list[int] = []
        for i in ranked:
            if not keep or choices.choices[i].mean_overhead < choices.choices[keep[-1]].mean_overhead - 1e-12:
                keep.append(i)
        as_is = 0
        if as_is not in keep:
            keep.append(as_is)
        pruned.append(sorted(keep, key=lambda i: -choices.choices[i].sizes))  # as is ... max
    while math.prod(len(p) for p in pruned) > MAX_COMBINATIONS and max(map(len, pruned)) > 2:
        widest = max(range(len(pruned)), key=lambda i: len(pruned[i]))
        pruned[widest] = _spread(pruned[widest], len(pruned[widest]) - 1)
    if math.prod(len(p) for p in pruned) > MAX_COMBINATIONS:  # many axes: greedy, the cheapest first
        # each axis to its maximum alone, cheapest (in overhead per compilation saved) first, cumulated
        def saving(a: int) -> float:
            as_is, top = reports[a].choices[pruned[a][0]], reports[a].choices[pruned[a][-1]]
            return (top.mean_overhead + 1e-12) / max(as_is.compiles - top.compiles, 1e-12)

        order = sorted(range(len(axes)), key=saving)
        combos = [
            tuple(p[-1] if a in order[:k] else p[0] for a, p in enumerate(pruned))
            for k in range(len(axes) + 1)
        ]
    else:
        combos = list(itertools.product(*pruned))
    for combo in combos:
        names = tuple(padded_columns[a][i][0] for a, i in enumerate(combo))
        if names not in found:
            found[names] = evaluate([padded_columns[a][i][1] for a, i in enumerate(combo)])
    if not axes:
        found[()] = evaluate([])
    outcomes = []
    for scheme in uniform:
        padded_all = []
        for column in columns:
            mapping = {s: scheme.pad(s) for s in set(column)}
            padded_all.append([mapping[s] for s in column])
        compiles, mean, worst = evaluate(padded_all)
        outcomes.append(SchemeOutcome(scheme.name, scheme.description, compiles, mean, worst))
    frontier = _frontier(found, lines)
    if also is not None:
        second = _Evaluator(points, also[1], separate)
        by_name = [{name: padded for name, padded, _ in options} for options in padded_columns]
        for index, axis in enumerate(reports):
            updated = []
            for choice in axis.choices:
                trial = [by_name[index][choice.name] if i == index else c for i, c in enumerate(columns)]
                _, mean, worst = second(trial)
                updated.append(replace(choice, also_mean_overhead=mean, also_max_overhead=worst))
            reports[index] = replace(axis, choices=tuple(updated))
        for place, line in enumerate(frontier):
            _, mean, worst = second([by_name[a][name] for a, name in enumerate(line.choices)])
            frontier[place] = replace(line, also_mean_overhead=mean, also_max_overhead=worst)
    return AxesReport(
        axes=tuple(reports),
        frontier=tuple(frontier),
        points=len(points),
        separate=separate,
        cost=cost_label,
        weights=weights_label,
        uniform=tuple(outcomes),
        also_cost=also[0] if also is not None else None,
    )
