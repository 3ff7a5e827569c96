"""What one ``warm()`` call asked for, resolved once (:class:`WarmOptions`), and the namespace it fills,
computed once from the real fingerprint (:class:`WarmPlan`).

Every step of a warm reads these two; none derives a namespace, a directory or a setting again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cache_protocol.signing import Signer, Verifier
from xla_cache.config import ClientConfig, namespace_dir
from xla_cache.frameworks import Framework
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.transfer.progress import Progress

__all__ = ["WarmOptions", "WarmPlan"]


@dataclass(frozen=True, kw_only=True)
class WarmOptions:
    """The arguments of one ``warm()`` call, each resolved once (:meth:`ClientConfig.resolve` for the
    server, token and base directory; the adapter for the framework)."""

    config: ClientConfig
    framework: Framework
    initialize: bool = True  # point the framework's persistent cache at the directory
    all_compilations: bool = True
    upload: bool = True
    follow: bool = False  # follow the change feed, and upload new compilations within a second
    timeout: float = 30.0  # the bound on the server conversation
    max_bytes: int | None = None  # at most this much is downloaded
    labels: Mapping[str, str] = field(default_factory=dict)
    progress: Progress | None = None
    signer: Signer | None = None  # signs what the uploader uploads (XLA_CACHE_SIGNING_KEY)
    trusted: Verifier | None = None  # only entries these keys signed are placed (XLA_CACHE_TRUSTED_KEYS)


@dataclass(frozen=True, kw_only=True)
class WarmPlan:
    """The namespace one warm fills and its directory, with the options it runs under."""

    options: WarmOptions
    namespace: str
    directory: Path  # <cache_dir>/<namespace>
    fingerprint: dict[str, Any]  # the runtime's (or the one given); {} for a namespace named without one
    register: bool  # register the namespace with the fingerprint (not when it was named outright)
    record_fingerprint: bool  # write the fingerprint into the directory (xla-cache push reads it)

    @classmethod
    def make(
        cls, options: WarmOptions, fingerprint: Mapping[str, Any] | None, namespace: str | None
    ) -> WarmPlan:
        """The plan of a warm of ``namespace`` as it is (nothing registered), or else of the namespace of
        ``fingerprint`` (default: the live runtime's, which needs the framework imported)."""
        if namespace is not None:
            given = dict(fingerprint or {})
            return cls(
                options=options,
                namespace=namespace,
                directory=namespace_dir(options.config.cache_dir, namespace),
                fingerprint=given,
                register=False,
                # the server's fingerprint of the namespace, recorded only if it is truly this namespace's
                record_fingerprint=bool(given) and namespace_id(given) == namespace,
            )
        real = dict(fingerprint) if fingerprint is not None else options.framework.fingerprint()
        derived = namespace_id(real)
        return cls(
            options=options,
            namespace=derived,
            directory=namespace_dir(options.config.cache_dir, derived),
            fingerprint=real,
            register=True,
            record_fingerprint=bool(real),
        )
