"""The startup hook of ``XLA_CACHE_AUTO=1``: an unmodified training job warms and uploads as ``warm()`` does.

Installed with the package at site-packages' root, beside ``xla_cache_auto.pth`` (whose import line calls
:func:`startup` at every interpreter start) and ``xla_cache_auto.start`` (the same entry point, for
interpreters that read PEP 829 ``.start`` files, which then skip the ``.pth`` file's import line).

It is the only module a Python process imports at start-up on the package's behalf, and it imports nothing
beyond the standard library's modules every interpreter has already loaded by then (``os``, ``sys``). With
the variable unset or ``0``, :func:`startup` returns at once. With it on, it adds one finder to
``sys.meta_path`` that watches for the import of ``torch_xla`` and ``jax``; once either has been imported
it hands over to :mod:`xla_cache.auto`, which waits for the runtime to be known (torch_xla: its device;
JAX: its first compilation) before it fingerprints and warms. Processes that never import a framework
(pip, a DataLoader worker, a shell tool) never import the client at all.

It never raises: a failure prints one line to stderr and the job goes on.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing itself costs more to import than this whole hook: not at start-up
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.abc import Loader
    from types import ModuleType
    from typing import Any

__all__ = ["AUTO_ENV", "FRAMEWORK_MODULES", "FrameworkFinder", "auto_setting", "installed", "startup"]

AUTO_ENV = "XLA_CACHE_AUTO"
FRAMEWORK_MODULES = ("torch_xla", "jax")  # the top-level modules whose import hands over to the client
_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")


def auto_setting(value: str | None) -> bool | None:
    """Whether ``XLA_CACHE_AUTO``'s ``value`` switches auto-activation on (True), off (False; unset too),
    or is not a value it takes (None: off, with a warning)."""
    text = (value or "").strip().lower()
    if text in _ON:
        return True
    if text in _OFF:
        return False
    return None


def _framework_imported(name: str) -> None:
    """Hand over to the client once framework module ``name`` finished importing (never raises)."""
    try:
        from xla_cache.auto import framework_imported

        framework_imported(name)
    except Exception as exc:  # the client is broken or absent: the job goes on without the cache
        _warn(f"auto-activation is off for this job: {type(exc).__name__}: {exc}")


def _warn(text: str) -> None:
    try:  # noqa: SIM105  (contextlib is not imported at start-up, and need not be)
        sys.stderr.write(f"WARNING xla_cache: xla-cache: {text}\n")
    except Exception:  # stderr closed: nothing more to do
        pass


class _Loader:
    """The framework's own loader, which calls back once the module has executed."""

    def __init__(self, loader: Any, name: str, callback: Callable[[str], None]) -> None:
        self._loader = loader
        self._name = name
        self._callback = callback

    def create_module(self, spec: Any) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._callback(self._name)

    def __getattr__(self, attribute: str) -> Any:  # get_resource_reader, is_package, get_code, ...
        return getattr(self._loader, attribute)


class FrameworkFinder:
    """A ``sys.meta_path`` finder that finds nothing itself: for a watched top-level module it asks the
    finders after it, and wraps the loader they found so that ``callback(name)`` runs right after the
    module executed. Each name is watched once."""

    def __init__(self, names: Sequence[str], callback: Callable[[str], None]) -> None:
        self._pending = set(names)
        self._callback = callback

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: Any = None) -> Any:
        if fullname not in self._pending:
            return None
        self._pending.discard(fullname)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                wrapped: Loader = _Loader(spec.loader, fullname, self._callback)  # type: ignore[assignment]
                spec.loader = wrapped
            return spec
        return None


def installed() -> FrameworkFinder | None:
    """This process's finder, if :func:`startup` installed one."""
    return next((f for f in sys.meta_path if isinstance(f, FrameworkFinder)), None)


def startup() -> None:
    """The entry point of the ``.pth`` and ``.start`` files: with ``XLA_CACHE_AUTO`` on, watch for the
    framework's import (once per process, however many site directories list the hook)."""
    try:
        setting = auto_setting(os.environ.get(AUTO_ENV))
        if setting is None:
            _warn(f"{AUTO_ENV}={os.environ.get(AUTO_ENV)!r} is neither 1 nor 0: auto-activation is off")
        if not setting or installed() is not None:
            return
        finder = FrameworkFinder(
            [name for name in FRAMEWORK_MODULES if name not in sys.modules], _framework_imported
        )
        sys.meta_path.insert(0, finder)
        for name in FRAMEWORK_MODULES:
            if name in sys.modules:  # imported before the hook ran (a sitecustomize): hand over now
                _framework_imported(name)
    except Exception as exc:
        _warn(f"auto-activation is off for this job: {type(exc).__name__}: {exc}")
