"""The few places the client touches torch_xla, each importing it lazily.

The client package imports without torch; only these functions load torch_xla, and the ones the background
uploader calls never import it themselves (they read it only if the job already has).
"""

from __future__ import annotations

import sys
from typing import Any

from client.errors import CacheAlreadyInitialized, TorchXlaUnavailable

__all__ = [
    "COUNTERS",
    "cache_is_initialized",
    "check_not_too_late",
    "compile_time_samples",
    "counter",
    "initialize_cache",
    "is_spmd_now",
    "loaded_torch_xla_version",
    "require_torch_xla",
]

COUNTERS = (
    "PersistentCacheHit",
    "PersistentCacheMiss",
    "UncachedCompile",
    "PersistentCacheDeserializeFailure",
)


def require_torch_xla() -> Any:
    """Import and return torch_xla, or raise :class:`TorchXlaUnavailable` saying why."""
    try:
        import torch_xla
    except Exception as exc:  # ImportError, or a broken install raising anything
        raise TorchXlaUnavailable(f"torch_xla cannot be imported ({type(exc).__name__}: {exc}).") from exc
    return torch_xla


def cache_is_initialized() -> bool:
    """True once torch_xla compiled a graph in this process (its persistent cache setting is then fixed)."""
    torch_xla = require_torch_xla()
    return bool(torch_xla._XLAC._xla_computation_cache_is_initialized())


def check_not_too_late() -> None:
    """Raise :class:`CacheAlreadyInitialized` if torch_xla already compiled a graph in this process."""
    if cache_is_initialized():
        raise CacheAlreadyInitialized(
            "torch_xla already compiled a graph in this process, so its persistent cache can no longer be "
            "set: call client.warm() before the first step (before any mark_step, .cpu() or .item())."
        )


def initialize_cache(path: str) -> None:
    """Point torch_xla's persistent cache at ``path`` (writable); a clear error if it is too late."""
    require_torch_xla()
    import torch_xla.runtime as xr

    check_not_too_late()
    xr.initialize_cache(path, readonly=False)


def _loaded() -> Any | None:
    """torch_xla if this process already imported it, else None (never imports it)."""
    return sys.modules.get("torch_xla")


def loaded_torch_xla_version() -> str | None:
    """``torch_xla.__version__`` if it is loaded in this process."""
    module = sys.modules.get("torch_xla")
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else None


def counter(name: str) -> int:
    """A torch_xla counter's value (0 when it never counted, or torch_xla is not loaded)."""
    if _loaded() is None:
        return 0
    import torch_xla.debug.metrics as met

    value = met.counter_value(name)
    return int(value) if value is not None else 0


def compile_time_samples() -> list[tuple[float, float]]:
    """Recent ``CompileTime`` samples as ``(wall-clock seconds, milliseconds)``; empty when unknown.

    torch_xla records a sample right after it writes the compiled entry, so an entry's compile time is the
    first sample at or just after the file's modification time.
    """
    if _loaded() is None:
        return []
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    if not data:
        return []
    samples = data[2]
    return [(float(stamp), float(value) / 1e6) for stamp, value in samples]


def is_spmd_now() -> bool | None:
    """Whether SPMD is on in this process now (None when torch_xla is not loaded)."""
    if _loaded() is None:
        return None
    import torch_xla.runtime as xr

    return bool(xr.is_spmd())
