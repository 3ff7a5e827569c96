"""torch_xla's side of a run report: its persistent-cache counters and compile times."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from xla_cache.frameworks import Framework
from xla_cache.localcache.cachedir import LocalFile
from xla_cache.runs.collectors import CompileCounts, MissFacts, RunCollector
from xla_cache.runs.sync_sites import install

__all__ = ["TorchXlaCollector"]


class TorchXlaCollector(RunCollector):
    """torch_xla's counters (``PersistentCacheHit``, ``UncachedCompile``,
    ``PersistentCacheDeserializeFailure``) and its ``CompileTime`` metric (nanoseconds), from
    ``torch_xla.debug.metrics``. torch_xla names entries by a hash only: no module name is known; where
    each was compiled is the call site of the ``mark_step()``/``sync()`` that compiled it
    (:mod:`xla_cache.runs.sync_sites`)."""

    def __init__(self, adapter: Framework) -> None:
        self._adapter = adapter
        self._start = self._read()
        self._sites = install() if "torch_xla" in sys.modules else None

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

    def process_index(self) -> int | None:
        if "torch_xla" not in sys.modules:
            return None
        import torch_xla.runtime as xr

        return int(xr.process_index()) if int(xr.process_count()) > 1 else None

    def facts(self, files: Sequence[LocalFile]) -> dict[str, MissFacts]:
        # The CompileTime sample torch_xla recorded right after writing each file (what uploads carry too).
        times = self._adapter.compile_times(files)
        sites = self._sites
        found: dict[str, MissFacts] = {}
        for item in files:
            ms = times.get(item.key)
            source = sites.site_of(item.mtime_ns) if sites is not None else None
            if ms is not None or source is not None:
                found[item.key] = MissFacts(
                    compile_seconds=None if ms is None else ms / 1000.0, source=source
                )
        return found
