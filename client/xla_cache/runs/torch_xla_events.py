"""torch_xla's side of a run report: its persistent-cache counters and compile times."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from xla_cache.cachedir import LocalFile
from xla_cache.frameworks import Framework
from xla_cache.runs.collectors import CompileCounts, MissFacts, RunCollector

__all__ = ["TorchXlaCollector"]


class TorchXlaCollector(RunCollector):
    """torch_xla's counters (``PersistentCacheHit``, ``UncachedCompile``,
    ``PersistentCacheDeserializeFailure``) and its ``CompileTime`` metric (nanoseconds), from
    ``torch_xla.debug.metrics``. torch_xla names entries by a hash only: no module name is known."""

    def __init__(self, adapter: Framework) -> None:
        self._adapter = adapter
        self._start = self._read()

    def framework(self) -> str:
        return "torch_xla"

    @staticmethod
    def _read() -> CompileCounts:
        if "torch_xla" not in sys.modules:
            return CompileCounts()
        import torch_xla.debug.metrics as met

        from xla_cache.frameworks.torch_xla import DESERIALIZE_FAILURE, counter

        data = met.metric_data("CompileTime")
        nanoseconds = float(data[1]) if data else 0.0
        return CompileCounts(
            hits=counter("PersistentCacheHit"),
            misses=counter("UncachedCompile"),
            compile_seconds=nanoseconds / 1e9,
            load_failures=counter(DESERIALIZE_FAILURE),
        )

    def counts(self) -> CompileCounts:
        return self._read().since(self._start)

    def process_index(self) -> int:
        if "torch_xla" not in sys.modules:
            return 0
        import torch_xla.runtime as xr

        return int(xr.process_index())

    def facts(self, files: Sequence[LocalFile]) -> dict[str, MissFacts]:
        # The CompileTime sample torch_xla recorded right after writing each file (what uploads carry too).
        times = self._adapter.compile_times(files)
        return {key: MissFacts(compile_seconds=ms / 1000.0) for key, ms in times.items()}
