"""Compile counts worked out by a test from a job's own sizes, to check the graph report's against: what a
reported padding choice does to a size, and the distinct size tuples a job's compiles leave once padded."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cache_server.graphs.padding import multiple_of, next_power_of_two

__all__ = ["choice_padding", "distinct_after", "padding"]


def padding(name: str, boundaries: Sequence[int]) -> Callable[[int], int]:
    """What a reported choice (``as is``, ``pow2``, ``mult8``, ``buckets4`` with its boundaries, ``max``)
    does to a size, worked out here from its name and boundaries."""
    if name == "as is":
        return lambda size: size
    if name == "pow2":
        return next_power_of_two
    if name.startswith("mult"):
        return multiple_of(int(name.removeprefix("mult")))
    assert name == "max" or name.startswith("buckets"), name
    tops = sorted(boundaries)
    return lambda size: next(top for top in tops if top >= size)


def distinct_after(jobs: Sequence[tuple[int, ...]], pads: Mapping[int, Callable[[int], int]]) -> int:
    """Compiles left once the sizes at these places of each compile are padded so: the distinct tuples."""
    same: Callable[[int], int] = lambda size: size  # noqa: E731
    return len({tuple(pads.get(i, same)(s) for i, s in enumerate(sizes)) for sizes in jobs})


def choice_padding(choice: Any) -> Callable[[int], int]:
    """:func:`padding` of a choice as the report's dataclass or its JSON has it."""
    if isinstance(choice, Mapping):
        return padding(choice["name"], choice["boundaries"])
    return padding(choice.name, choice.boundaries)
