"""What a run report counts, read from the framework: the counts and the collector's interface, one
collector per framework (:mod:`xla_cache.runs.torch_xla_events`; JAX and torchax in
:mod:`xla_cache.runs.jax_events`), chosen by :func:`xla_cache.runs.choice.collector_for`.

A collector is made when the warm points the framework at its directory, before the job's first compile, so
the framework's process-wide numbers are the run's own (each collector still subtracts what it found then).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from xla_cache.localcache.cachedir import LocalFile

__all__ = [
    "CompileCounts",
    "MissFacts",
    "NullCollector",
    "RunCollector",
]


@dataclass(frozen=True)
class CompileCounts:
    """The run's persistent-cache loads (hits), compiles (misses), the compile seconds paid and the entries
    the framework failed to load, since the warm. Each field is the run number of its name
    (:data:`cache_protocol.runs.RUN_NUMBERS`): a number the framework measures is a field here."""

    hits: int = 0
    misses: int = 0
    compile_seconds: float = 0.0
    load_failures: int = 0

    def since(self, start: CompileCounts) -> CompileCounts:
        """What grew from ``start`` to these (never less than nothing)."""
        grown = {f.name: max(0, getattr(self, f.name) - getattr(start, f.name)) for f in fields(self)}
        return CompileCounts(**grown)

    def numbers(self) -> dict[str, float]:
        """The counts by their run numbers' names."""
        return asdict(self)


@dataclass(frozen=True)
class MissFacts:
    """What the client knows of one compile: the graph's name, JAX's cache-key component hashes, the
    compile's own seconds and where the job compiled it (``train.py:57``; each None when unknown)."""

    module: str | None = None
    components: dict[str, str] | None = None
    compile_seconds: float | None = None
    source: str | None = None


class RunCollector(ABC):
    """Reads one framework's cache counters and what it knows of each compile."""

    @abstractmethod
    def framework(self) -> str:
        """The framework the report names (one of :data:`cache_protocol.runs.FRAMEWORKS`)."""

    @abstractmethod
    def counts(self) -> CompileCounts:
        """The run's numbers so far."""

    def process_index(self) -> int | None:
        """This process's index in the framework's multi-process runtime, None where the runtime has one
        process (the run's index is then the launcher's rank: :mod:`xla_cache.runs.ranks`)."""
        return None

    def facts(self, files: Sequence[LocalFile]) -> dict[str, MissFacts]:
        """What is known of the compiles that wrote ``files``, by key (keys not known are left out)."""
        return {}

    def runtime(self) -> dict[str, Any] | None:
        """The components of the framework's cache key this runtime sets (a report's ``runtime``: what a
        prefill compares its target with), or None where the framework has none to tell."""
        return None


class NullCollector(RunCollector):
    """A framework without counters: the report carries the warm's and the uploader's numbers only."""

    def __init__(self, name: str) -> None:
        self._name = name

    def framework(self) -> str:
        return self._name

    def counts(self) -> CompileCounts:
        return CompileCounts()
