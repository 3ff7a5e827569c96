"""Which collector a run's report reads: the one of the job's framework."""

from __future__ import annotations

from xla_cache.frameworks import Framework
from xla_cache.runs.collectors import NullCollector, RunCollector
from xla_cache.runs.jax_events import JaxCollector
from xla_cache.runs.torch_xla_events import TorchXlaCollector

__all__ = ["collector_for"]


def collector_for(adapter: Framework) -> RunCollector:
    """The collector of the framework ``adapter`` stands for (JAX's counts torchax jobs too)."""
    if adapter.name == "torch_xla":
        return TorchXlaCollector(adapter)
    if adapter.name == "jax":
        return JaxCollector.start()
    return NullCollector(adapter.name)
