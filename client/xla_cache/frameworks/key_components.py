"""The target runtime as JAX's cache key sees it, without the target.

:func:`target_facts` is what :func:`xla_cache.frameworks.jax.runtime_facts` reads of a live runtime, made
from a list of devices: this host's, or a TPU topology's that no device backs (``jax.experimental.
topologies``). Its fingerprint names the namespace the target job will compute.

:func:`key_components` is what enters JAX's key beside the computation and is not all in the namespace's
fingerprint: the platform version, the topology, the device ids and coordinates (on TPU the device
assignment is in the compile options), the flags, the compression and whether the cache directory's path
enters the key (``jax_persistent_cache_enable_xla_caches``; JAX 0.10 puts the autotune directory into the
compile options unless it is ``none``). Real runs record these in their reports; a prefill compares its own
with the latest real run's before it publishes (:func:`differences`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cache_protocol.fingerprint import flags_digest

__all__ = ["COMPARED", "differences", "key_components", "target_facts"]

MAX_DEVICES = 256  # the device list recorded: enough to tell device orders apart, bounded for a pod

COMPARED = (
    "jax_version",
    "jaxlib_version",
    "platform",
    "platform_version",
    "device_kind",
    "topology",
    "devices",
    "xla_flags_digest",
    "libtpu_init_args_digest",
    "compression",
    "xla_caches",
)
"""The components compared, in the order a refusal names them."""


def _topology(devices: Sequence[Any]) -> dict[str, Any] | None:
    coords = [tuple(c) for d in devices if (c := getattr(d, "coords", None)) is not None]
    if not coords:
        return None
    extent = [
        max(c[axis] for c in coords) - min(c[axis] for c in coords) + 1 for axis in range(len(coords[0]))
    ]
    return {"extent": extent, "slices": len({getattr(d, "slice_index", 0) for d in devices})}


def target_facts(devices: Sequence[Any], topology: str | None) -> dict[str, Any]:
    """The runtime facts of a job whose devices are ``devices``: this runtime's own where ``topology`` is
    None, else those of a TPU job on that topology (one process per host, as TPU VMs run)."""
    from xla_cache.frameworks.jax import runtime_facts

    facts = runtime_facts()
    if topology is None:
        return facts
    first = devices[0]
    processes = {getattr(d, "process_index", 0) for d in devices}
    facts.update(
        platform=str(getattr(first, "platform", "tpu")),
        platform_version=getattr(getattr(first, "client", None), "platform_version", None),
        device_kind=first.device_kind,
        device_count=len(devices),
        local_device_count=sum(1 for d in devices if getattr(d, "process_index", 0) == min(processes)),
        process_count=len(processes),
        topology=_topology(devices),
    )
    return facts


def key_components(devices: Sequence[Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The components of JAX's key for jobs on ``devices`` (see the module's doc); JAX imported."""
    import importlib

    jax: Any = importlib.import_module("jax")
    jaxlib: Any = importlib.import_module("jaxlib")

    from xla_cache.frameworks.jax import compression

    first = devices[0]
    return {
        "jax_version": jax.__version__,
        "jaxlib_version": getattr(jaxlib, "__version__", None),
        "platform": str(getattr(first, "platform", "")),
        "platform_version": getattr(getattr(first, "client", None), "platform_version", None),
        "device_kind": getattr(first, "device_kind", None),
        "topology": _topology(devices),
        "devices": [
            [int(d.id), [int(c) for c in getattr(d, "coords", None) or ()]] for d in devices[:MAX_DEVICES]
        ],
        "xla_flags_digest": flags_digest(env.get("XLA_FLAGS")),
        "libtpu_init_args_digest": flags_digest(env.get("LIBTPU_INIT_ARGS")),
        "compression": compression(),
        "xla_caches": str(jax.config.jax_persistent_cache_enable_xla_caches),
    }


def differences(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """The components that differ, each as ``name: ours X, the real run Y`` (compared where both have it;
    a run that recorded the device list of a different size is compared on its length)."""
    found = []
    for name in COMPARED:
        if name not in ours or name not in theirs:
            continue
        mine, real = ours[name], theirs[name]
        if name == "devices" and isinstance(mine, list) and isinstance(real, list):
            mine, real = [list(map(_plain, d)) for d in mine], [list(map(_plain, d)) for d in real]
        if _plain(mine) != _plain(real):
            found.append(f"{name}: prefill {_short(mine)}, the real run {_short(real)}")
    return found


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _short(value: Any, longest: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= longest else text[: longest - 3] + "..."
