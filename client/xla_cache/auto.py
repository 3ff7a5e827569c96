"""``XLA_CACHE_AUTO=1``: an unmodified job warms and uploads exactly as ``warm()`` would have it do.

The start-up hook (:mod:`xla_cache_hook`, installed at site-packages' root) calls
:func:`framework_imported` once ``torch_xla`` or ``jax`` finished importing. Nothing is fingerprinted then:
a torch_xla job may still call ``xr.use_spmd()``, a JAX job ``jax.distributed.initialize()`` or set its
own cache options. Instead the framework's adapter arranges to call back once the runtime is known and
before the first compilation (:meth:`~xla_cache.frameworks.Framework.watch_first_compile`: torch_xla when
the job asks for its device, JAX at its first compilation), and only then does :class:`Activation` warm:
one ``warm()`` per process, its fingerprint the runtime's as it is then, with the server, token and cache
directory of the usual order (flag > environment > config file > default). The warm is done before the
job's first compilation rather than beside it, so that a warmed job compiles nothing (BENCHMARKS.md,
"Auto-activation").

Nothing here raises into the job: a job that set its framework's cache itself keeps it (one warning says
so), and any failure (a broken config file, a framework too new) is one warning, after which the job goes
on without the cache. Ranks that are threads of one process wait for the one warm of their process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from xla_cache.frameworks import Framework, all_frameworks
from xla_cache.logs import logger
from xla_cache.warm_report import WarmReport
from xla_cache.warming import warm

__all__ = ["ACTIVATION", "Activation", "framework_imported"]

Warm = Callable[[Framework], WarmReport]


def _warm(framework: Framework) -> WarmReport:
    return warm(framework=framework.name)


class Activation:
    """This process's one auto-activated warm: the first framework whose runtime is known warms, once;
    every later call returns at once. ``warm_with`` warms for a framework (``warm()`` itself in a job)."""

    def __init__(self, warm_with: Warm = _warm) -> None:
        self._warm_with = warm_with
        self._lock = threading.RLock()  # rank threads wait for the warm; the warm's own calls pass through
        self._pid = os.getpid()
        self._done = False
        self._busy = False
        self.report: WarmReport | None = None
        self.refused: str | None = None  # why the cache was left alone, when it was

    @property
    def done(self) -> bool:
        return self._done and self._pid == os.getpid()

    def trigger(self, framework: Framework) -> Callable[[], None]:
        """The callback a framework's adapter calls when its runtime is known (cheap once done)."""

        def fire() -> None:
            if not self.done:
                self.activate(framework)

        return fire

    def activate(self, framework: Framework) -> None:
        """Warm for ``framework`` unless this process already did (or is doing, in this very thread)."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child: its parent's warm is not its own
                self._pid, self._done, self.report, self.refused = os.getpid(), False, None, None
            if self._done or self._busy:
                return
            self._busy = True
            try:
                self._activate(framework)
            finally:
                self._done, self._busy = True, False

    def _activate(self, framework: Framework) -> None:
        try:
            own = framework.own_cache()
            if own is not None:
                self.refused = f"the job sets {own} itself"
                logger.warning(
                    "xla-cache: XLA_CACHE_AUTO leaves %s's persistent cache alone: the job sets %s itself "
                    "(unset it to use the shared cache, or call xla_cache.warm())",
                    framework.name,
                    own,
                )
                return
            self.report = self._warm_with(framework)
        except Exception as exc:  # never into the job: a broken config file, a framework too new, a bug
            self.refused = f"{type(exc).__name__}: {exc}"
            logger.warning(
                "xla-cache: XLA_CACHE_AUTO could not warm %s's cache (%s); the job goes on without it",
                framework.name,
                self.refused,
            )


ACTIVATION = Activation()


def framework_imported(module: str) -> None:
    """The start-up hook's call once top-level module ``module`` finished importing: the adapter of that
    module watches for its runtime (never raises)."""
    try:
        framework = next((f for f in all_frameworks().values() if f.module == module), None)
        if framework is None or framework.watch_first_compile(ACTIVATION.trigger(framework)):
            return
        logger.warning("xla-cache: XLA_CACHE_AUTO cannot watch %s: call xla_cache.warm()", module)
    except Exception as exc:
        logger.warning(
            "xla-cache: XLA_CACHE_AUTO is off for this job (%s: %s); the job goes on without the cache",
            type(exc).__name__,
            exc,
        )
