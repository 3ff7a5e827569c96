"""A runtime's namespace: its live fingerprint (:func:`collect_fingerprint`, built by the framework's adapter)
and the id that names it (:func:`namespace_id`: the adapter's readable prefix and a digest of the
fingerprint). Above both :mod:`xla_cache.frameworks.fingerprint` (the fields and rules every fingerprint
shares) and :mod:`xla_cache.frameworks` (the adapters), so neither imports the other back."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from cache_protocol.fingerprint import hashed_part
from xla_cache.frameworks import choose, framework_named
from xla_cache.frameworks.fingerprint import canonical_json

__all__ = ["collect_fingerprint", "namespace_id"]


def namespace_id(fingerprint: Mapping[str, Any]) -> str:
    """The namespace of a fingerprint: its framework's readable prefix and a digest of the whole of it."""
    digest = hashlib.sha256(canonical_json(hashed_part(fingerprint)).encode()).hexdigest()[:32]
    prefix = framework_named(str(fingerprint.get("framework", "torch_xla"))).namespace_prefix(fingerprint)
    return f"{prefix}-{digest}"


def collect_fingerprint(framework: str = "auto", env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fingerprint of this process's live runtime of ``framework`` (``auto``: see
    :func:`xla_cache.frameworks.choose`)."""
    return choose(framework).fingerprint(env)
