"""Where the client's settings come from: the call's own arguments first, then the environment.

``XLA_CACHE_SERVER`` (the server's URL), ``XLA_CACHE_TOKEN`` (a bearer token) and ``XLA_CACHE_DIR`` (the base
cache directory; else ``$XDG_CACHE_HOME/xla-cache``, else ``~/.cache/xla-cache``). ``warm()``, the CLI and
``doctor`` all resolve them here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClientConfig", "default_cache_dir", "namespace_dir"]


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XLA_CACHE_DIR``, else ``$XDG_CACHE_HOME/xla-cache``, else ``~/.cache/xla-cache``."""
    env = os.environ if env is None else env
    configured = env.get("XLA_CACHE_DIR")
    if configured:
        return Path(configured)
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "xla-cache"


def namespace_dir(cache_dir: Path | str, namespace: str) -> Path:
    """The directory the framework's cache uses for one namespace: ``<cache_dir>/<namespace>``.

    One directory per namespace keeps entries of different runtimes apart on disk too.
    """
    return Path(cache_dir) / namespace


@dataclass(frozen=True)
class ClientConfig:
    """The server (None: local cache only), the token and the base cache directory of one call."""

    server: str | None
    token: str | None
    cache_dir: Path

    @classmethod
    def resolve(
        cls,
        server: str | None = None,
        token: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ClientConfig:
        """The given values, each missing one from the environment."""
        env = os.environ if env is None else env
        return cls(
            server=server or env.get("XLA_CACHE_SERVER") or None,
            token=token or env.get("XLA_CACHE_TOKEN") or None,
            cache_dir=Path(cache_dir) if cache_dir is not None else default_cache_dir(env),
        )
