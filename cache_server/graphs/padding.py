"""Padding a size: rounding up (the next power of two, the next multiple of a step) and the best K bucket
boundaries for the sizes seen and their weights (one dynamic programme over the distinct sizes). Used by
the axis analysis of :mod:`.axes`; pure functions."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Sequence

__all__ = ["DP_SIZES", "best_boundaries", "boundaries_for", "multiple_of", "next_power_of_two", "pad_to"]

DP_SIZES = 32  # distinct sizes the boundaries' search works on at most (beyond: evenly spread tops)


def next_power_of_two(size: int) -> int:
    """The smallest power of two at least ``size`` (0 stays 0)."""
    return 0 if size <= 0 else 1 << (size - 1).bit_length()


def multiple_of(step: int) -> Callable[[int], int]:
    """Rounding up to a multiple of ``step`` (0 stays 0)."""

    def padded(size: int) -> int:
        return 0 if size <= 0 else -(-size // step) * step

    return padded


def _layer(
    tops: Sequence[int],
    prefix_w: Sequence[float],
    prefix_s: Sequence[float],
    prev: list[float],
    nxt: list[float],
    arg: list[int],
) -> None:
    """One more bucket: ``nxt[j]`` the least padded size of groups 0..j in one bucket more than ``prev``,
    the last bucket (groups i..j, padded to ``tops[j]``) starting at ``arg[j]`` (divide and conquer: the best
    start does not decrease with ``j``). Groups i..j cost ``tops[j] * W(i..j) - S(i..j)`` (prefix sums)."""
    stack = [(0, len(tops) - 1, 0, len(tops) - 1)]
    while stack:
        lo, hi, opt_lo, opt_hi = stack.pop()
        if lo > hi:
            continue
        mid = (lo + hi) // 2
        if mid == 0:
            found, where = prev[0], 0
        else:
            top = tops[mid]
            first = max(opt_lo, 1)
            values = [
                prev[i - 1] - top * prefix_w[i] + prefix_s[i] for i in range(first, min(mid, opt_hi) + 1)
            ]
            best = min(range(len(values)), key=values.__getitem__)
            found = values[best] + top * prefix_w[mid + 1] - prefix_s[mid + 1]
            where = first + best
        nxt[mid], arg[mid] = found, where
        stack.append((lo, mid - 1, opt_lo, where))
        stack.append((mid + 1, hi, where, opt_hi))


def best_boundaries(sizes: Sequence[int], weights: Sequence[float], buckets: int) -> tuple[int, ...]:
    """The at most ``buckets`` bucket tops (seen sizes, ascending, the last the largest) that minimise the
    weighted padded size ``sum(weight * top(size))`` of the distinct ascending ``sizes`` with their
    ``weights``.

    Dynamic programming over the sorted sizes (divide and conquer on the monotone split points); beyond
    :data:`DP_SIZES` sizes only evenly spread seen sizes are candidate tops (the result is then near best).
    """
    return boundaries_for(sizes, weights, (buckets,))[buckets]


def boundaries_for(
    sizes: Sequence[int], weights: Sequence[float], counts: Sequence[int]
) -> dict[int, tuple[int, ...]]:
    """:func:`best_boundaries` for each of ``counts`` at once (one dynamic programme, up to the largest)."""
    n = len(sizes)
    buckets = min(max(counts), n)
    if n > DP_SIZES:  # group the sizes under evenly spread candidate tops
        tops = sorted({(i + 1) * n // DP_SIZES - 1 for i in range(DP_SIZES)})
        group_w: list[float] = []
        group_s: list[float] = []
        start = 0
        for top in tops:
            group_w.append(math.fsum(weights[start : top + 1]))
            group_s.append(
                math.fsum(
                    w * s for w, s in zip(weights[start : top + 1], sizes[start : top + 1], strict=True)
                )
            )
            start = top + 1
        values = [sizes[t] for t in tops]
    else:
        values = list(sizes)
        group_w = list(weights)
        group_s = [w * s for w, s in zip(weights, sizes, strict=True)]
    m = len(values)
    prefix_w = [0.0, *itertools.accumulate(group_w)]
    prefix_s = [0.0, *itertools.accumulate(group_s)]

    def cost(i: int, j: int) -> float:  # groups i..j (inclusive) padded to values[j]
        return values[j] * (prefix_w[j + 1] - prefix_w[i]) - (prefix_s[j + 1] - prefix_s[i])

    best = [cost(0, j) for j in range(m)]  # one bucket for groups 0..j
    splits: list[list[int]] = [[0] * m]
    for _ in range(1, buckets):
        nxt = [math.inf] * m
        arg = [0] * m
        _layer(values, prefix_w, prefix_s, best, nxt, arg)
        best = nxt
        splits.append(arg)
    found: dict[int, tuple[int, ...]] = {}
    for count in counts:
        if count >= n:
            found[count] = tuple(sizes)
            continue
        tops_found: list[int] = []
        j = m - 1
        for layer in range(min(count, buckets) - 1, -1, -1):
            tops_found.append(values[j])
            if layer == 0:
                break
            j = splits[layer][j] - 1
            if j < 0:
                break
        found[count] = tuple(sorted(set(tops_found)))
    return found


def pad_to(boundaries: Sequence[int]) -> Callable[[int], int]:
    def padded(size: int) -> int:
        return boundaries[bisect.bisect_left(boundaries, size)]

    return padded
