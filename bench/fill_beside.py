"""The "fill beside" variant of auto-activation, for ``bench/auto_fill.py`` only (the client warms before).

Where auto-activation would warm (the runtime is known: torch_xla's device query), this points the
framework at its namespace's directory at once and fills the directory in a background thread, so the job's
first compilations run while entries are still arriving (torch_xla 2.7 finds entries that arrive in its
cache directory mid-run). It uploads nothing and reports no run: it is the fill alone, timed against
today's warm.

The bench's interpreter runs :func:`install` from a ``.pth`` line when ``BENCH_AUTO_FILL=beside``: it
replaces the warm of :data:`xla_cache.auto.ACTIVATION` once the hook hands over to the client.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

MODE_ENV = "BENCH_AUTO_FILL"


def fill_beside(framework: Any) -> Any:
    """Point ``framework`` at its namespace's directory now; fill the directory in a daemon thread."""
    from xla_cache.config import ClientConfig, namespace_dir
    from xla_cache.frameworks.namespace import namespace_id
    from xla_cache.warming import warm

    config = ClientConfig.resolve()
    fingerprint = framework.fingerprint()
    directory = namespace_dir(config.cache_dir, namespace_id(fingerprint))
    directory.mkdir(parents=True, exist_ok=True)
    framework.initialize(directory)
    started = time.monotonic()

    def fill() -> None:
        report = warm(framework=framework.name, fingerprint=fingerprint, initialize=False, upload=False)
        done = os.environ.get("BENCH_FILL_DONE")
        if done:  # when the fill ended, seconds after it began, and what it placed
            with open(done, "w") as out:
                out.write(f"{time.monotonic() - started:.3f} {report.downloaded_entries}\n")

    threading.Thread(target=fill, name="bench-fill-beside", daemon=True).start()
    return None


def _handed_over(name: str) -> None:
    import xla_cache.auto as auto

    auto.ACTIVATION._warm_with = fill_beside  # the bench's variant, nowhere else
    auto.framework_imported(name)


def install() -> None:
    """With ``BENCH_AUTO_FILL=beside``: the hook's hand-over installs :func:`fill_beside` first."""
    if os.environ.get(MODE_ENV) != "beside":
        return
    import xla_cache_hook

    finder = xla_cache_hook.installed()
    if finder is not None:
        finder._callback = _handed_over
