"""PyTorch/XLA: its persistent cache (``torch_xla.runtime.initialize_cache``), fingerprint and counters.

torch_xla's own cache key (the entry's file name) covers the graph, the XLA flags, the raw values of
``XLA_HLO_DEBUG``, ``XLA_IR_DEBUG`` and ``TPU_MEGACORE`` and the torch_xla revision, but not the device
ordinal, the libtpu version or (before 2.8) the torch revision. The fingerprint records everything else an
executable depends on, and every setting that gives the same program other keys (:data:`SETTINGS`), so a
job with such a setting gets a namespace of its own instead of a second copy of every entry in the shared
one; entries are shared only between jobs with equal fingerprints.

Fingerprint fields (all JSON scalars, or a dict of them):

=========================  =====================================================================
``schema``                 version of this layout (1); bumping it moves every job to new namespaces
``framework``              ``"torch_xla"``
``torch_xla_version``      ``torch_xla.__version__``; ``torch_xla_git``: its git revision
``torch_version``          ``torch.__version__``; ``torch_git``: its git revision
``jax_version``            installed jax / jaxlib versions (torch_xla's Pallas kernels use them), or None
``jaxlib_version``
``device_type``            PJRT device type (``CPU``, ``TPU``, ``CUDA``, ...)
``device_kind``            PJRT device kind (``TPU v4``, ``cpu``, ...); see :func:`runtime_facts`
``global_device_count``    runtime devices over all processes
``process_count``          processes in the job
``spmd``                   SPMD on or off
``process_index``          this process's PJRT index when SPMD is off (its executables are bound to its
                           devices), None with SPMD (every host runs the same program). Ranks that are
                           threads of one process (``xmp.spawn`` on CPU/GPU: one thread per device) share
                           the process's index, its cache directory and its replicated executables.
``pjrt_plugins``           ``{distribution: version}`` of installed PJRT plugins (libtpu, CUDA plugin)
``accelerator_type``       ``TPU_ACCELERATOR_TYPE`` / ``ACCELERATOR_TYPE`` when set, else None
``xla_flags_digest``       SHA-256 of the normalised ``--xla*`` tokens of ``XLA_FLAGS`` (None: no tokens)
``libtpu_init_args_digest``  the same for ``LIBTPU_INIT_ARGS``
``xla_flags``              those flags by name (``{"--xla_foo": "1"}``; values redacted with
                           ``XLA_CACHE_REDACT_FLAG_VALUES``): not part of the namespace id
``libtpu_init_args``       the same for ``LIBTPU_INIT_ARGS``
``XLA_HLO_DEBUG`` ...      the torch_xla settings of :data:`SETTINGS`, each under its variable's name and
                           only when set (a job that sets none keeps the namespace id it had before
                           they were recorded); see :func:`settings`
=========================  =====================================================================

The namespace's readable prefix is ``<device_type lower-cased>-tx<torch_xla_version>``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xla_cache.errors import CacheAlreadyInitialized, TorchXlaUnavailable
from xla_cache.frameworks import Framework, call_first
from xla_cache.frameworks.fingerprint import (
    FINGERPRINT_SCHEMA,
    distribution_version,
    runtime_environment,
    safe_label,
)
from xla_cache.localcache.cachedir import LocalFile

__all__ = [
    "COUNTERS",
    "FRAMEWORK",
    "PLUGIN_DISTRIBUTIONS",
    "SETTINGS",
    "TorchXla",
    "build_fingerprint",
    "counter",
    "deserialize_failure_cause",
    "match_compile_times",
    "runtime_facts",
    "settings",
]

COUNTERS = (
    "PersistentCacheHit",
    "PersistentCacheMiss",
    "UncachedCompile",
    "PersistentCacheDeserializeFailure",
)
DESERIALIZE_FAILURE = "PersistentCacheDeserializeFailure"
PERSISTENT_CACHE_ENV = "XLA_PERSISTENT_CACHE_PATH"  # torch_xla reads it at its first compilation

# PJRT plugins whose version changes the compiled code but not torch_xla's own key.
PLUGIN_DISTRIBUTIONS = ("libtpu", "libtpu-nightly", "torch_xla_cuda_plugin", "jax-cuda12-pjrt")


@dataclass(frozen=True)
class Setting:
    """An environment variable torch_xla 2.7 hashes into its cache key, or reads while tracing or lowering
    a graph, and how torch_xla parses it (``raw``: the string as it is; ``bool``: ``GetEnvBool``; ``int``:
    ``GetEnvInt``/``atol``; ``float``: ``GetEnvDouble``/``atof``; ``text``: ``GetEnvString``), with its
    default (None: no default is equivalent to it) and where torch_xla reads it."""

    variable: str
    parse: str
    default: str | None
    source: str


SETTINGS = (
    # Hashed into every key, as raw strings (csrc/runtime/env_hash.cc HashXlaEnvVars, raw_vars): "1" and
    # "true" give different keys, and so do "0" and unset; only an empty value is the same as unset.
    # XLA_HLO_DEBUG / XLA_IR_DEBUG also put op metadata (source lines, IR frames) into the HLO
    # (csrc/lowering_context.cpp, init_python_bindings.cpp MapXlaEnvVarsToLazy).
    Setting("XLA_HLO_DEBUG", "raw", None, "runtime/env_hash.cc, lowering_context.cpp"),
    Setting("XLA_IR_DEBUG", "raw", None, "runtime/env_hash.cc, init_python_bindings.cpp"),
    Setting("TPU_MEGACORE", "raw", None, "runtime/env_hash.cc (torch_xla sets megacore_dense on TPU v4)"),
    # Change the dtypes of the traced graph (csrc/dtype.cpp): other graphs, other keys.
    Setting("XLA_USE_BF16", "bool", "0", "dtype.cpp"),
    Setting("XLA_DOWNCAST_BF16", "bool", "0", "dtype.cpp"),
    Setting("XLA_USE_32BIT_LONG", "bool", "0", "dtype.cpp"),
    # Change which ops are traced.
    Setting("XLA_DISABLE_FUNCTIONALIZATION", "bool", "0", "aten_xla_type.cpp, tensor_methods.cpp"),
    Setting("XLA_NO_SPECIAL_SCALARS", "bool", "0", "init_python_bindings.cpp (scalars as parameters)"),
    # Read while compiling, after the key is computed: same key, an executable with or without
    # input/output aliasing (xla_graph_executor.cpp GetBufferDonors, SetBufferDonors).
    Setting("XLA_ENABLE_PARAM_ALIASING", "bool", "1", "xla_graph_executor.cpp GetBufferDonors"),
    # Auto-sharding: hashed into the key with the mesh (xla_graph_executor.cpp), changes the partitioning.
    Setting("XLA_AUTO_SPMD", "bool", "0", "device.cpp, xla_sharding_util.cpp"),
    Setting("XLA_AUTO_SPMD_MESH", "text", None, "xla_graph_executor.cpp (hashed)"),
    # Read while lowering or compiling, after the key is computed: same key, another executable.
    Setting(
        "XLA_STABLEHLO_COMPILE", "bool", "0", "runtime/pjrt_computation_client.cc (compiles via StableHLO)"
    ),
    Setting("EXPERIMENTAL_XLA_UNBOUNDED_DYNAMISM", "bool", "0", "helpers.h"),
    Setting("DISABLE_NUMERIC_CC_TOKEN", "bool", "0", "token_handler.cpp"),
    Setting("XLA_DENSE_GATHER_FACTOR", "int", "8192", "data_ops.cpp"),
    Setting("XLA_DENSE_SCATTER_FACTOR", "int", "100", "xla_lower_util.cpp"),
    Setting("XLA_PARAMETER_WRAPPING_THREADSHOLD", "int", "3200", "xla_graph_executor.cpp"),
    Setting("XLA_MAX_PADDING_FACTOR", "float", "1.25", "layout_manager.cpp"),
    Setting("XLA_RESIZE_SPLIT_FACTOR", "float", "3", "resize_ops.cpp"),
    Setting("XLA_LAYOUTS", "text", None, "layout_manager.cpp"),
    # Python side: every op is compiled on its own (torch_xla/__init__.py reads == "1").
    Setting("XLA_USE_EAGER_DEBUG_MODE", "eq1", "0", "torch_xla/__init__.py"),
)
"""The torch_xla 2.7 settings in a fingerprint (paths under ``torch_xla/csrc/`` unless given)."""

_INT = re.compile(r"\s*([+-]?\d+)")
_FLOAT = re.compile(r"\s*([+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)")


def _parsed(setting: Setting, value: str) -> str:
    """``value`` as torch_xla reads it, written one way (C's ``atoi``/``atof``: a number's leading part)."""
    if setting.parse == "bool":
        if value in ("true", "false"):
            return "1" if value == "true" else "0"
        match = _INT.match(value)
        return "1" if match and int(match.group(1)) != 0 else "0"
    if setting.parse == "eq1":
        return "1" if value == "1" else "0"
    if setting.parse == "int":
        match = _INT.match(value)
        return str(int(match.group(1))) if match else "0"
    if setting.parse == "float":
        match = _FLOAT.match(value)
        return repr(float(match.group(1))) if match else repr(0.0)
    return value  # raw, text


def settings(facts: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """The torch_xla settings of ``env`` that give other keys or other executables, by variable name.

    A variable unset or empty is left out (torch_xla reads an empty one as unset for the raw ones, and an
    empty number as 0, which is no real setting); one parsed to its default is left out too, so only a
    setting that changes something moves a job to another namespace. A raw one is kept as it is written,
    as torch_xla hashes it: ``XLA_HLO_DEBUG=0`` is a key of its own. ``TPU_MEGACORE=megacore_dense`` on a
    TPU v4, torch_xla's own default there, is left out."""
    found: dict[str, str] = {}
    for setting in SETTINGS:
        value = env.get(setting.variable)
        if not value:
            continue
        value = _parsed(setting, value)
        default = setting.default
        if setting.parse == "float" and default is not None:
            default = repr(float(default))
        if value == default:
            continue
        if setting.variable == "TPU_MEGACORE" and value == "megacore_dense" and _tpu_v4(facts):
            continue
        found[setting.variable] = value
    return found


def _tpu_v4(facts: Mapping[str, Any]) -> bool:
    kind = str(facts.get("device_kind") or "").lower()
    return str(facts.get("device_type", "")).upper() == "TPU" and "v4" in kind


def _loaded() -> Any | None:
    """torch_xla if this process already imported it, else None (never imports it)."""
    return sys.modules.get("torch_xla")


def counter(name: str) -> int:
    """A torch_xla counter's value (0 when it never counted, or torch_xla is not loaded)."""
    if _loaded() is None:
        return 0
    import torch_xla.debug.metrics as met

    value = met.counter_value(name)
    return int(value) if value is not None else 0


def build_fingerprint(facts: Mapping[str, Any], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fingerprint of a runtime described by ``facts`` (see :func:`runtime_facts`) and ``env``.

    Pure: everything it reads is passed in, so it can be tested without torch_xla.
    """
    env = os.environ if env is None else env
    spmd = bool(facts["spmd"])
    return {
        "schema": FINGERPRINT_SCHEMA,
        "framework": "torch_xla",
        "torch_xla_version": str(facts["torch_xla_version"]),
        "torch_xla_git": facts.get("torch_xla_git"),
        "torch_version": str(facts["torch_version"]),
        "torch_git": facts.get("torch_git"),
        "jax_version": facts.get("jax_version"),
        "jaxlib_version": facts.get("jaxlib_version"),
        "device_type": str(facts["device_type"]),
        "device_kind": facts.get("device_kind"),
        "global_device_count": int(facts["global_device_count"]),
        "process_count": int(facts["process_count"]),
        "spmd": spmd,
        "process_index": None if spmd else int(facts["process_index"]),
        **runtime_environment(facts, env),
        **settings(facts, env),
    }


def _device_kind(torch_xla: Any, spmd: bool, device_type: str) -> str | None:
    """PJRT's device kind of the first device.

    torch_xla 2.7 answers only for a non-SPMD device; with SPMD on, the default device is the virtual
    ``SPMD:0`` and the query fails. Then the kind is left out (None): the SPMD flag, the device type and
    count, the plugin version and ``accelerator_type`` still separate the hardware generations.
    """
    try:
        if hasattr(torch_xla, "device"):
            device = torch_xla.device()
        else:  # torch_xla before 2.5
            import torch_xla.core.xla_model as xm

            device = xm.xla_device()
        return str(torch_xla._XLAC._xla_device_kind(str(device)))
    except Exception:
        if not spmd:
            raise
        return None


def runtime_facts() -> dict[str, Any]:
    """Read the live runtime's facts from torch and torch_xla (imported here, never at module import).

    This starts the PJRT client but compiles nothing, so the persistent cache can still be initialized after.
    Call ``torch_xla.runtime.use_spmd()`` before it in SPMD jobs, or the fingerprint says SPMD is off.
    """
    import torch
    import torch_xla
    import torch_xla.runtime as xr
    import torch_xla.version as txv

    spmd = bool(xr.is_spmd())
    device_type = str(xr.device_type())
    return {
        "torch_xla_version": torch_xla.__version__,
        "torch_xla_git": getattr(txv, "__xla_gitrev__", None),
        "torch_version": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "jax_version": distribution_version("jax"),
        "jaxlib_version": distribution_version("jaxlib"),
        "device_type": device_type,
        "device_kind": _device_kind(torch_xla, spmd, device_type),
        "global_device_count": int(xr.global_runtime_device_count()),
        "process_count": int(xr.process_count()),
        "spmd": spmd,
        "process_index": int(xr.process_index()),
        "pjrt_plugins": {
            name: version for name in PLUGIN_DISTRIBUTIONS if (version := distribution_version(name))
        },
    }


def match_compile_times(files: Sequence[LocalFile], samples: list[tuple[float, float]]) -> dict[str, int]:
    """Pair each file with the ``CompileTime`` sample torch_xla recorded right after writing it.

    torch_xla records the sample a few milliseconds after closing the file; a sample more than a second
    after the file's modification time is not taken (the compile time stays unknown).
    """
    times: dict[str, int] = {}
    used: set[int] = set()
    for item in sorted(files, key=lambda f: f.mtime_ns):
        written = item.mtime_ns / 1e9
        best: int | None = None
        for index, (stamp, _) in enumerate(samples):
            if index in used or not (written - 0.01 <= stamp <= written + 1.0):
                continue
            if best is None or stamp < samples[best][0]:
                best = index
        if best is not None:
            used.add(best)
            times[item.key] = round(samples[best][1])
    return times


def _compile_time_samples() -> list[tuple[float, float]]:
    """Recent ``CompileTime`` samples as ``(wall-clock seconds, milliseconds)``; empty when unknown."""
    if _loaded() is None:
        return []
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    if not data:
        return []
    return [(float(stamp), float(value) / 1e6) for stamp, value in data[2]]


def deserialize_failure_cause(version: str | None) -> str:
    """Why torch_xla fails to load cache entries, as far as the version tells."""
    if version and (version.startswith("2.8") or version.startswith("2.9")):
        return (
            f"torch_xla {version} writes persistent-cache entries it cannot load (pytorch/xla #9094 on TPU, "
            "#8930 on GPU: 'Deserializing serialized executable not supported'), so every graph is compiled "
            "again; the shared cache cannot help this version: use torch_xla 2.7 or a release with the fix"
        )
    return (
        f"torch_xla {version or '(unknown version)'} could not load some entries: they are corrupt or were "
        "written by a different runtime; run `xla-cache doctor` to check that this torch_xla loads its own "
        "entries"
    )


class TorchXla(Framework):
    """torch_xla 2.x (2.7 is the newest whose persistent cache loads its own entries)."""

    name = "torch_xla"
    module = "torch_xla"
    auto_rank = 10  # a torch_xla job may import jax too (Pallas kernels)

    def require(self) -> Any:
        try:
            import torch_xla
        except Exception as exc:  # ImportError, or a broken install raising anything
            raise TorchXlaUnavailable(f"torch_xla cannot be imported ({type(exc).__name__}: {exc}).") from exc
        return torch_xla

    def fingerprint(self, env: Mapping[str, str] | None = None) -> dict[str, Any]:
        self.require()
        return build_fingerprint(runtime_facts(), env)

    def namespace_prefix(self, fingerprint: Mapping[str, Any]) -> str:
        device = safe_label(fingerprint.get("device_type", "unknown"), 16).lower()
        return f"{device}-tx{safe_label(fingerprint.get('torch_xla_version', 'unknown'), 48)}"

    def cache_is_initialized(self) -> bool:
        """True once torch_xla compiled a graph in this process (its cache setting is then fixed)."""
        return bool(self.require()._XLAC._xla_computation_cache_is_initialized())

    def check_not_too_late(self, directory: Path | None = None) -> None:
        if self.cache_is_initialized():
            raise CacheAlreadyInitialized(
                "torch_xla already compiled a graph in this process, so its persistent cache can no "
                "longer be set: call xla_cache.warm() before the first step (before any mark_step, .cpu() "
                "or .item())."
            )

    def initialize(self, directory: Path, *, all_compilations: bool = True) -> None:
        # torch_xla caches every compilation; there is no threshold to lower.
        self.require()
        import torch_xla.runtime as xr

        self.check_not_too_late()
        xr.initialize_cache(str(directory), readonly=False)

    def setup_lines(self, directory: Path) -> list[str]:
        return [f"torch_xla.runtime.initialize_cache({str(directory)!r}, readonly=False)"]

    def compile_times(self, files: Sequence[LocalFile]) -> dict[str, int]:
        return match_compile_times(files, _compile_time_samples())

    def spmd_now(self) -> bool | None:
        """Whether SPMD is on in this process now (None when torch_xla is not loaded)."""
        if _loaded() is None:
            return None
        import torch_xla.runtime as xr

        return bool(xr.is_spmd())

    def loaded_version(self) -> str | None:
        """``torch_xla.__version__`` if this process loaded it."""
        version = getattr(_loaded(), "__version__", None)
        return str(version) if version is not None else None

    def upload_blocked(self, fingerprint: Mapping[str, Any]) -> str | None:
        now = self.spmd_now()
        if now is not None and now != bool(fingerprint.get("spmd")):
            return (
                "SPMD was switched on or off after xla_cache.warm(), so new entries do not belong to its "
                "namespace; call torch_xla.runtime.use_spmd() before xla_cache.warm()"
            )
        return None

    def load_failures(self) -> int:
        return counter(DESERIALIZE_FAILURE)

    def watch_first_compile(self, callback: Callable[[], None]) -> bool:
        """The runtime is known once the job asks for its device (``torch_xla.device()``,
        ``xm.xla_device()``, ``xr.xla_device()``: by then it has called ``use_spmd()`` if it does, and
        nothing has compiled); a job that never asks is caught at its first ``mark_step``/``sync``."""
        torch_xla = self.require()
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        call_first(xm, "xla_device", callback, after=True)
        call_first(xr, "xla_device", callback, after=True)
        call_first(torch_xla._XLAC, "_xla_step_marker", callback)
        return True

    def own_cache(self) -> str | None:
        path = os.environ.get(PERSISTENT_CACHE_ENV)
        return f"{PERSISTENT_CACHE_ENV}={path}" if path else None

    def load_failure_cause(self) -> str:
        return f"({DESERIALIZE_FAILURE}): {deserialize_failure_cause(self.loaded_version())}"


FRAMEWORK = TorchXla()
