"""The runtime fingerprint and the namespace id derived from it.

A fingerprint records everything a compiled executable depends on beyond what the framework's own cache
key covers; entries are shared only between jobs with equal fingerprints. Each framework adapter
(:mod:`xla_cache.frameworks`) builds its own and documents its fields; every fingerprint has ``schema`` (this
layout's version) and ``framework``.

Namespace id (stable; documented so other tools can compute it)::

    <readable prefix>-<first 32 hex digits of SHA-256(canonical JSON)>

where the canonical JSON is ``json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))`` of the
fingerprint less its flag maps (``xla_flags``, ``libtpu_init_args``: the digests beside them are hashed),
and the readable prefix is the framework's: ``<device_type lower-cased>-tx<torch_xla_version>`` for torch_xla,
``<platform>-jax<jax_version>`` for JAX; every character outside ``[A-Za-z0-9._-]`` in it is replaced by
``_``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from cache_protocol.fingerprint import FLAG_VARIABLES, flags_digest, parse_flags, redact
from xla_cache.config import redacts_flag_values

__all__ = [
    "FINGERPRINT_SCHEMA",
    "canonical_json",
    "distribution_version",
    "flags_digest",
    "runtime_environment",
    "safe_label",
]

FINGERPRINT_SCHEMA = 1

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def distribution_version(name: str) -> str | None:
    """The installed version of a distribution, or None (read from its metadata: nothing is imported)."""
    from importlib import metadata  # costly to import (email, zipfile): only where a version is read

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def safe_label(value: object, longest: int) -> str:
    """``value`` as a piece of a namespace name: unsafe characters replaced by ``_``, at most ``longest``."""
    return _UNSAFE.sub("_", str(value))[:longest]


def runtime_environment(facts: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The fingerprint fields every framework shares: installed PJRT plugins (from ``facts``), the
    accelerator type, digests of the XLA flags and the flags themselves (from ``env``).

    The flags appear twice: ``xla_flags_digest`` is part of the namespace id; ``xla_flags`` (name to value,
    values redacted with ``XLA_CACHE_REDACT_FLAG_VALUES``) is not, and lets the server say which flags set
    two namespaces apart. Likewise ``libtpu_init_args_digest`` and ``libtpu_init_args``.
    """
    plugins = dict(facts.get("pjrt_plugins") or {})
    fields: dict[str, Any] = {
        "pjrt_plugins": {name: plugins[name] for name in sorted(plugins)},
        "accelerator_type": env.get("TPU_ACCELERATOR_TYPE") or env.get("ACCELERATOR_TYPE") or None,
    }
    hide = redacts_flag_values(env)
    for flag in FLAG_VARIABLES:
        value = env.get(flag.variable)
        flags = parse_flags(value)
        fields[flag.digest_field] = flags_digest(value)
        fields[flag.map_field] = redact(flags) if hide else flags
    return fields


def canonical_json(fingerprint: Mapping[str, Any]) -> str:
    """The one serialisation the namespace id hashes."""
    return json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
