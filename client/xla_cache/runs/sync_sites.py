"""Where a torch_xla job's compiles happen, with no debug setting: the call site of the ``mark_step()`` or
``torch_xla.sync()`` that compiled each graph (issue 46, item 4).

torch_xla names its entries by a hash, and source lines reach the HLO only with ``XLA_HLO_DEBUG=1``, which
gives every graph another key. Both ``xm.mark_step()`` and ``torch_xla.sync()`` cut the graph through
``torch_xla._XLAC._xla_step_marker``; :class:`SyncSites` wraps that one attribute. Each call reads the
``UncachedCompile`` counter before and after (a fraction of a microsecond each); a call that compiled is
kept as a window of wall-clock time with the first frame of the caller outside torch, torch_xla and this
package (``train.py:57``). The persistent cache writes an entry while its graph compiles, inside the call,
so an entry whose modification time falls in a window was compiled there (:meth:`SyncSites.site_of`).

A graph that compiles elsewhere (``.cpu()``, ``.item()``, a tensor printed) has no site. At most
:data:`KEPT_WINDOWS` windows are kept (the oldest go first): the run reporter asks about new entries every
few seconds, well before that many compiles.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from cache_protocol.runs import SOURCE_MAX_LENGTH

__all__ = ["KEPT_WINDOWS", "SLACK_NS", "SyncSites", "caller_site", "install"]

KEPT_WINDOWS = 4096
SLACK_NS = 20_000_000  # a file's time stamp may trail its write by the file system's clock granularity
_COUNTER = "UncachedCompile"
_ATTRIBUTE = "_xla_step_marker"
_SKIPPED_PACKAGES = ("torch_xla", "torch", "xla_cache")


def _package_roots() -> tuple[str, ...]:
    roots: list[str] = []
    for name in _SKIPPED_PACKAGES:
        module = sys.modules.get(name)
        location = getattr(module, "__file__", None)
        if location:
            roots.append(os.path.dirname(os.path.abspath(location)) + os.sep)
    return tuple(roots)


def caller_site(frame: FrameType | None, skipped: tuple[str, ...]) -> str | None:
    """``file:line`` of the first frame from ``frame`` outwards whose file is in none of the ``skipped``
    folders; the file as its last two path parts (``jobs/train.py:57``); None when every frame is skipped."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(skipped) and not filename.startswith("<frozen"):
            parts = filename.replace(os.sep, "/").rsplit("/", 2)
            shown = "/".join(parts[-2:]) if len(parts) > 2 else filename
            return f"{shown}:{frame.f_lineno}"[-SOURCE_MAX_LENGTH:]
        frame = frame.f_back
    return None


@dataclass(frozen=True)
class _Window:
    start_ns: int
    end_ns: int
    site: str


class SyncSites:
    """Records the call site of every ``_xla_step_marker`` call that compiled, for :meth:`site_of`."""

    def __init__(self, xlac: Any) -> None:
        self._xlac = xlac
        self._original: Callable[..., Any] = getattr(xlac, _ATTRIBUTE)
        self._count: Callable[[str], Any] = xlac._xla_counter_value
        self._skipped = _package_roots()
        self._windows: deque[_Window] = deque(maxlen=KEPT_WINDOWS)
        self._lock = threading.Lock()

    def wrapper(self) -> Callable[..., Any]:
        original, count, windows = self._original, self._count, self._windows

        def _xla_step_marker(*args: Any, **kwargs: Any) -> Any:
            before = count(_COUNTER)
            start = time.time_ns()
            try:
                return original(*args, **kwargs)
            finally:
                if count(_COUNTER) != before:
                    site = caller_site(sys._getframe(1), self._skipped)
                    if site is not None:
                        windows.append(_Window(start, time.time_ns(), site))

        _xla_step_marker.__wrapped__ = original  # type: ignore[attr-defined]
        _xla_step_marker.__xla_cache_sites__ = self  # type: ignore[attr-defined]
        return _xla_step_marker

    def site_of(self, mtime_ns: int) -> str | None:
        """The call site whose compile window holds ``mtime_ns`` (within :data:`SLACK_NS`), else None."""
        with self._lock:
            windows = list(self._windows)
        for window in reversed(windows):
            if window.start_ns - SLACK_NS <= mtime_ns <= window.end_ns + SLACK_NS:
                return window.site
            if window.end_ns + SLACK_NS < mtime_ns:
                break  # windows are in time order: none earlier can hold it
        return None


def install() -> SyncSites | None:
    """Wrap torch_xla's step marker once per process (again: the one installed); None when torch_xla is not
    loaded or has no such attribute (another version), so no site is known."""
    torch_xla = sys.modules.get("torch_xla")
    xlac = getattr(torch_xla, "_XLAC", None)
    current = getattr(xlac, _ATTRIBUTE, None)
    if current is None or not hasattr(xlac, "_xla_counter_value"):
        return None
    installed = getattr(current, "__xla_cache_sites__", None)
    if isinstance(installed, SyncSites):
        return installed
    sites = SyncSites(xlac)
    setattr(xlac, _ATTRIBUTE, sites.wrapper())
    return sites
