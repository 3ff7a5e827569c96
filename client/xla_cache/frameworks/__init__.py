"""One adapter per framework whose persistent compilation cache the client fills and uploads.

An adapter says what goes into the runtime fingerprint, how to point the framework's cache at the warmed
directory, which file names in it are entries, how to check an entry before it is placed, and what to
upload. Each adapter is one module of this package defining ``FRAMEWORK``; the modules are found by
listing the package, so supporting another framework (TorchTPU's directory cache, say) is one new module.
Beside the adapters: what every fingerprint shares (``fingerprint.py``) and a runtime's namespace, its live
fingerprint and the id that names it (``namespace.py``); neither defines ``FRAMEWORK``.

No module here imports its framework at import time: the adapters import it when a method needs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from cache_protocol import is_key
from xla_cache.errors import ClientError
from xla_cache.localcache.cachedir import TEMP_SUFFIX, LocalFile

__all__ = ["AUTO", "Framework", "all_frameworks", "call_first", "choose", "framework_named"]

AUTO = "auto"


class Framework(ABC):
    """What the client needs to know of one framework's persistent compilation cache."""

    name: str
    """The framework's name, as ``warm(framework=...)`` and ``--framework`` take it and the fingerprint's
    ``framework`` field records it."""
    module: str
    """The top-level module whose presence (imported, else installed) ``auto`` looks for."""
    auto_rank: int = 100
    """Among several frameworks a job has imported, ``auto`` picks the lowest rank."""

    # -- the runtime --------------------------------------------------------------------------------------
    @abstractmethod
    def require(self) -> Any:
        """Import and return the framework, or raise a :class:`ClientError` saying why it cannot be."""

    @abstractmethod
    def fingerprint(self, env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The runtime's fingerprint (:mod:`xla_cache.frameworks.fingerprint`); its ``framework`` is
        :attr:`name`."""

    @abstractmethod
    def namespace_prefix(self, fingerprint: Mapping[str, Any]) -> str:
        """The readable start of the namespace id of ``fingerprint`` (device and version)."""

    @abstractmethod
    def check_not_too_late(self, directory: Path) -> None:
        """Raise :class:`~xla_cache.errors.CacheAlreadyInitialized` if the cache can no longer be pointed at
        ``directory``."""

    @abstractmethod
    def initialize(self, directory: Path, *, all_compilations: bool = True) -> None:
        """Point the framework's persistent cache at ``directory``.

        ``all_compilations``: cache every compilation (where the framework skips small or fast ones).
        """

    @abstractmethod
    def setup_lines(self, directory: Path) -> list[str]:
        """The code a job that does not call ``warm()`` needs to use ``directory`` as ``initialize`` does."""

    # -- the cache directory ------------------------------------------------------------------------------
    def is_entry(self, name: str) -> bool:
        """Whether a file name in the cache directory is an entry (not a lock, temporary or index file)."""
        return is_key(name) and not name.endswith(TEMP_SUFFIX)

    def entry_problem(self, path: Path) -> str | None:
        """Why the entry file at ``path`` cannot be loaded by the framework, or None when it can."""
        return None

    def compile_times(self, files: Sequence[LocalFile]) -> dict[str, int]:
        """The compile time (ms) of the entries among ``files`` whose time is known, by key."""
        return {}

    def uploads_here(self) -> bool:
        """Whether this process uploads (in a multi-host job, the process the framework writes from)."""
        return True

    def upload_blocked(self, fingerprint: Mapping[str, Any]) -> str | None:
        """Why this process must stop uploading to the namespace of ``fingerprint`` (None: it may go on)."""
        return None

    def load_failures(self) -> int:
        """How many entries the framework failed to load in this process so far (0 when it cannot tell)."""
        return 0

    def load_failure_cause(self) -> str:
        """What a rising :meth:`load_failures` most likely means."""
        return "the framework could not load entries of its own cache"

    # -- auto-activation (XLA_CACHE_AUTO=1, :mod:`xla_cache.auto`) ------------------------------------------
    def watch_first_compile(self, callback: Callable[[], None]) -> bool:
        """Arrange for ``callback`` to run once the runtime is known and before the framework's first
        compilation (called right after the framework's import); False when this adapter cannot."""
        return False

    def own_cache(self) -> str | None:
        """The job's own setting of the framework's persistent cache, if it made one (auto-activation then
        leaves the cache alone and says so), else None."""
        return None


@cache
def all_frameworks() -> dict[str, Framework]:
    """Every adapter of this package, by name."""
    found: dict[str, Framework] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        framework = getattr(module, "FRAMEWORK", None)
        if isinstance(framework, Framework):
            found[framework.name] = framework
    return found


def framework_named(name: str) -> Framework:
    """The adapter called ``name``; :class:`ClientError` naming the known ones otherwise."""
    frameworks = all_frameworks()
    if name not in frameworks:
        known = ", ".join(sorted(frameworks))
        raise ClientError(f"unknown framework {name!r}: use {AUTO} or one of {known}")
    return frameworks[name]


def choose(name: str = AUTO) -> Framework:
    """The adapter for ``name``; for ``auto``, the framework the job has imported (torch_xla before JAX,
    which torch_xla jobs may import too), else the one installed."""
    if name != AUTO:
        return framework_named(name)
    ranked = sorted(all_frameworks().values(), key=lambda f: (f.auto_rank, f.name))
    for framework in ranked:
        if framework.module in sys.modules:
            return framework
    for framework in ranked:
        if importlib.util.find_spec(framework.module) is not None:
            return framework
    known = ", ".join(f.module for f in ranked)
    raise ClientError(f"no supported framework is installed (looked for {known})")


def call_first(owner: Any, name: str, callback: Callable[[], None], *, after: bool = False) -> None:
    """Replace the function ``owner.name`` (a module's) by one that calls ``callback()`` before it (or,
    ``after``, once it returned), for :meth:`Framework.watch_first_compile`. The callers that look the
    function up on ``owner`` when they call it, as the frameworks' own modules do, get the wrapper."""
    original = getattr(owner, name)
    if getattr(original, "__xla_cache_wrapped__", None) is not None:
        return  # wrapped already (a second watch in this process)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not after:
            callback()
        result = original(*args, **kwargs)
        if after:
            callback()
        return result

    wrapper.__xla_cache_wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(original, "__name__", name)
    wrapper.__doc__ = getattr(original, "__doc__", None)
    setattr(owner, name, wrapper)
