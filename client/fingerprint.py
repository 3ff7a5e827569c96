"""The runtime fingerprint and the namespace id derived from it.

torch_xla's own cache key (the entry's file name) covers the graph, the XLA flags and the torch_xla revision,
but not the device ordinal, the libtpu version or (before 2.8) the torch revision. The fingerprint records
everything else an executable depends on; entries are shared only between jobs with equal fingerprints.

Fields (all JSON scalars, or a dict of them):

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
=========================  =====================================================================

Namespace id (stable; documented so other tools can compute it)::

    <device_type lower-cased>-tx<torch_xla_version>-<first 32 hex digits of SHA-256(canonical JSON)>

where the canonical JSON is ``json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))`` and every
character outside ``[A-Za-z0-9._-]`` in the readable prefix is replaced by ``_``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Mapping
from importlib import metadata
from typing import Any

__all__ = [
    "FINGERPRINT_SCHEMA",
    "PLUGIN_DISTRIBUTIONS",
    "build_fingerprint",
    "canonical_json",
    "collect_fingerprint",
    "flags_digest",
    "namespace_id",
    "runtime_facts",
]

FINGERPRINT_SCHEMA = 1

# PJRT plugins whose version changes the compiled code but not torch_xla's own key.
PLUGIN_DISTRIBUTIONS = ("libtpu", "libtpu-nightly", "torch_xla_cuda_plugin", "jax-cuda12-pjrt")

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def flags_digest(value: str | None) -> str | None:
    """SHA-256 (hex) of the ``--xla*`` tokens of a flag string, or None when it has none.

    Tokens are normalised so that equivalent settings give equal digests: a flag given twice keeps its last
    value (as XLA reads it), and the flags are sorted by name. Other tokens are ignored.
    """
    if not value:
        return None
    try:
        tokens = shlex.split(value)
    except ValueError:  # unbalanced quotes: XLA itself splits on whitespace
        tokens = value.split()
    last: dict[str, str] = {}
    for token in tokens:
        if token.startswith("--xla"):
            name = token.split("=", 1)[0]
            last[name] = token
    if not last:
        return None
    joined = "\n".join(last[name] for name in sorted(last))
    return hashlib.sha256(joined.encode()).hexdigest()


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def build_fingerprint(facts: Mapping[str, Any], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fingerprint of a runtime described by ``facts`` (see :func:`runtime_facts`) and ``env``.

    Pure: everything it reads is passed in, so it can be tested without torch_xla.
    """
    env = os.environ if env is None else env
    spmd = bool(facts["spmd"])
    plugins = {name: version for name, version in sorted(dict(facts.get("pjrt_plugins") or {}).items())}
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
        "pjrt_plugins": plugins,
        "accelerator_type": env.get("TPU_ACCELERATOR_TYPE") or env.get("ACCELERATOR_TYPE") or None,
        "xla_flags_digest": flags_digest(env.get("XLA_FLAGS")),
        "libtpu_init_args_digest": flags_digest(env.get("LIBTPU_INIT_ARGS")),
    }


def canonical_json(fingerprint: Mapping[str, Any]) -> str:
    """The one serialisation the namespace id hashes."""
    return json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def namespace_id(fingerprint: Mapping[str, Any]) -> str:
    """The namespace of a fingerprint: a readable prefix and a digest of the whole fingerprint."""
    digest = hashlib.sha256(canonical_json(fingerprint).encode()).hexdigest()[:32]
    device = _UNSAFE.sub("_", str(fingerprint.get("device_type", "unknown")).lower())[:16]
    version = _UNSAFE.sub("_", str(fingerprint.get("torch_xla_version", "unknown")))[:48]
    return f"{device}-tx{version}-{digest}"


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
        "jax_version": _distribution_version("jax"),
        "jaxlib_version": _distribution_version("jaxlib"),
        "device_type": device_type,
        "device_kind": _device_kind(torch_xla, spmd, device_type),
        "global_device_count": int(xr.global_runtime_device_count()),
        "process_count": int(xr.process_count()),
        "spmd": spmd,
        "process_index": int(xr.process_index()),
        "pjrt_plugins": {
            name: version for name in PLUGIN_DISTRIBUTIONS if (version := _distribution_version(name))
        },
    }


def collect_fingerprint(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fingerprint of this process's live torch_xla runtime."""
    return build_fingerprint(runtime_facts(), env)
