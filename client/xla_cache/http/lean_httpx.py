"""httpx, imported without its own command-line module.

``import httpx`` also imports ``httpx._main`` (httpx's ``httpx`` command) wherever rich and click are
installed, and those cost about 0.3 s of every start of ``xla-cache`` and of every job's first import of
the client, for a command nobody here runs. The import system's own rule skips it: a module whose
``sys.modules`` entry is None is not imported (``ImportError``), and httpx then defines a stand-in ``main``
and goes on. The entry is removed again at once, so a later ``import httpx._main`` in the same process
still works. Everything in the client imports httpx through this module.
"""

from __future__ import annotations

import sys

_MAIN = "httpx._main"
_blocked = "httpx" not in sys.modules and _MAIN not in sys.modules
if _blocked:
    sys.modules[_MAIN] = None  # type: ignore[assignment]
try:
    import httpx
finally:
    if _blocked and sys.modules.get(_MAIN, ...) is None:
        del sys.modules[_MAIN]

__all__ = ["httpx"]
