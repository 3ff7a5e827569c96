"""The stored variants of one module, indexed so that each miss finds its nearest variant quickly.

A run that compiled 1,000 shapes of a graph stored at 3,000 others asks for a million comparisons if each
miss is compared with each variant (over a minute in Python). Instead, the variants are hashed by their
parameter dimensions with one (and, for small signatures, two) of them left out: a miss finds the variants
that differ from it in one dimension (or two) by as many look-ups as it has dimensions (or pairs), and only
when none does, compares itself with the latest :data:`FALLBACK` variants of its structure.

"Nearest" is :func:`cache_server.graphs.shapes.nearest`'s: the fewest differing dimensions, then the
smallest total difference; among equals, the latest stored. Only variants there before the miss count
(``before``).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

from cache_server.index.miss_facts import StoredGraph

__all__ = ["FALLBACK", "ModuleVariants", "Variant", "VariantsCache", "quick_shape"]

FALLBACK = 256
"""Variants of one structure compared one by one when no variant differs in one or two dimensions."""
PAIRS_UP_TO = 12
"""Signatures with at most this many dimensions are also hashed with each pair of dimensions left out."""

Structure = str  # the parameters' text with each dimension list replaced by its rank
_DIMS = re.compile(r"\[([^\]]*)\]")


@dataclass(frozen=True)
class Variant:
    """A stored variant: its entry, its parameters' structure and their dimensions, flattened."""

    graph: StoredGraph
    structure: Structure
    flat: tuple[int, ...]


@lru_cache(maxsize=100_000)
def quick_shape(shapes: str) -> tuple[Structure, tuple[int, ...]] | None:
    """The structure and flattened dimensions of a recorded shapes text (cached: the same texts come back
    request after request), without building its :class:`ShapeSignature`; None if it is not of that form."""
    cut = shapes.rfind(") -> ")
    if not shapes.startswith("(") or cut < 0:
        return None
    params = shapes[1:cut]
    try:
        flat = tuple(
            int(d.strip().removeprefix("<="))
            for group in _DIMS.findall(params)
            for d in group.split(",")
            if d.strip()
        )
    except ValueError:
        return None
    structure = _DIMS.sub(lambda m: f"[{len([d for d in m.group(1).split(',') if d.strip()])}]", params)
    return structure, flat


class ModuleVariants:
    """The parsed variants of one module in one namespace."""

    def __init__(self, graphs: Iterable[StoredGraph]) -> None:
        self.by_shapes: dict[str, list[StoredGraph]] = defaultdict(list)
        self._exact: dict[tuple[Structure, tuple[int, ...]], list[Variant]] = defaultdict(list)
        self._one: dict[tuple[Structure, int, tuple[int, ...]], list[Variant]] = defaultdict(list)
        self._two: dict[tuple[Structure, int, int, tuple[int, ...]], list[Variant]] | None = None
        self._by_structure: dict[Structure, list[Variant]] = defaultdict(list)
        self._by_body: dict[str, list[StoredGraph]] = defaultdict(list)
        for graph in graphs:  # the latest stored first
            if graph.shapes is None:
                continue
            if graph.structure:
                self._by_body[graph.structure].append(graph)
            self.by_shapes[graph.shapes].append(graph)
            shape = quick_shape(graph.shapes)
            if shape is None:
                continue
            structure, flat = shape
            variant = Variant(graph, structure, flat)
            self._exact[(structure, flat)].append(variant)
            self._by_structure[structure].append(variant)
            for i in range(len(flat)):
                self._one[(structure, i, flat[:i] + flat[i + 1 :])].append(variant)

    def same_structure(self, structure: str | None) -> list[StoredGraph]:
        """The variants whose body has this structure digest (the same graph at other sizes), latest first."""
        return self._by_body.get(structure or "", [])

    def _pairs(self) -> dict[tuple[Structure, int, int, tuple[int, ...]], list[Variant]]:
        """The variants hashed with each pair of dimensions left out (built when first needed)."""
        if self._two is None:
            self._two = defaultdict(list)
            for variants in self._by_structure.values():
                for variant in variants:
                    flat = variant.flat
                    if len(flat) <= PAIRS_UP_TO:
                        for i, j in combinations(range(len(flat)), 2):
                            self._two[
                                (variant.structure, i, j, flat[:i] + flat[i + 1 : j] + flat[j + 1 :])
                            ].append(variant)
        return self._two

    def nearest(self, shapes: str, before: Callable[[StoredGraph], bool]) -> Variant | None:
        """The nearest variant stored before (``before``) with parameters comparable to ``shapes``'s."""
        shape = quick_shape(shapes)
        if shape is None:
            return None
        structure, flat = shape

        def best(candidates: Iterable[Variant]) -> Variant | None:
            chosen: tuple[tuple[int, int, float], Variant] | None = None
            for variant in candidates:
                if not before(variant.graph):
                    continue
                diffs = [abs(a - b) for a, b in zip(flat, variant.flat, strict=True) if a != b]
                rank = (len(diffs), sum(diffs), -variant.graph.created_at.timestamp())
                if chosen is None or rank < chosen[0]:
                    chosen = (rank, variant)
            return None if chosen is None else chosen[1]

        found = best(self._exact.get((structure, flat), ()))
        if found is not None:
            return found
        found = best(
            v for i in range(len(flat)) for v in self._one.get((structure, i, flat[:i] + flat[i + 1 :]), ())
        )
        if found is not None:
            return found
        if len(flat) <= PAIRS_UP_TO:
            found = best(
                v
                for i, j in combinations(range(len(flat)), 2)
                for v in self._pairs().get((structure, i, j, flat[:i] + flat[i + 1 : j] + flat[j + 1 :]), ())
            )
            if found is not None:
                return found
        return best(self._by_structure.get(structure, [])[:FALLBACK])


class VariantsCache:
    """The last :data:`CACHED_MODULES` modules' indexes, reused while their variants are the same (the
    dashboard asks for a run's detail again every refresh); safe to share between request threads."""

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[object, ...], ModuleVariants] = OrderedDict()

    def get(self, namespace: str, module: str, graphs: Sequence[StoredGraph]) -> ModuleVariants:
        """The index of these variants of ``module`` (built unless the same ones were indexed lately)."""
        stamp = (
            namespace,
            module,
            len(graphs),
            max((g.created_at for g in graphs), default=None),
            min((g.created_at for g in graphs), default=None),
        )
        with self._lock:
            found = self._items.get(stamp)
            if found is not None:
                self._items.move_to_end(stamp)
                return found
        built = ModuleVariants(graphs)
        with self._lock:
            self._items[stamp] = built
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return built
