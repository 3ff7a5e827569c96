"""Where a torch_xla job compiled each graph, with no debug setting (issue 46, item 4): the call site of
the ``mark_step()``/``sync()`` whose call compiled, from :mod:`xla_cache.runs.sync_sites`.

These drive the wrapper over a stand-in for ``torch_xla._XLAC`` (its step marker and counter); the real
torch_xla job's sites are checked end to end in tests/e2e/test_why_compiled_e2e.py.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from xla_cache.runs.sync_sites import SLACK_NS, SyncSites, caller_site

HERE = Path(__file__).name


class FakeXlac(SimpleNamespace):
    """``_xla_step_marker`` compiles (counts one ``UncachedCompile`` and writes a file) when asked to."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.compiles: int | None = None  # torch_xla answers None before its first compile
        self.directory = directory
        self.compile_next = False

    def _xla_counter_value(self, name: str) -> int | None:
        assert name == "UncachedCompile"
        return self.compiles

    def _xla_step_marker(self, *args: Any, **kwargs: Any) -> str:
        if self.compile_next:
            self.compiles = (self.compiles or 0) + 1
            (self.directory / f"entry{self.compiles}").write_bytes(b"executable")
        return "stepped"


def step(xlac: FakeXlac) -> str:
    return xlac._xla_step_marker("")  # the line every site below names


STEP_LINE = step.__code__.co_firstlineno + 1


def test_a_compiling_step_is_named_by_its_caller_and_a_step_that_loads_by_none(tmp_path: Path) -> None:
    xlac = FakeXlac(tmp_path)
    sites = SyncSites(xlac)
    xlac._xla_step_marker = sites.wrapper()
    xlac.compile_next = True
    assert step(xlac) == "stepped"  # the step's own answer passes through
    xlac.compile_next = False
    step(xlac)  # no compile: no window
    later = time.time_ns()
    first = (tmp_path / "entry1").stat().st_mtime_ns
    assert sites.site_of(first) == f"client/{HERE}:{STEP_LINE}"
    assert sites.site_of(later + 10 * SLACK_NS) is None  # a file written after every window


def test_a_site_is_the_first_frame_outside_the_skipped_packages() -> None:
    here = sys._getframe()
    assert caller_site(here, ()) == f"client/{HERE}:{here.f_lineno}"
    skipped = (os.path.dirname(os.path.abspath(__file__)) + os.sep,)
    outer = caller_site(here, skipped)  # this file skipped: pytest's frame that called the test
    assert outer is not None and HERE not in outer
    # every frame skipped (files, and code a runner executes from a string): no site
    assert caller_site(here, ("/", "<")) is None
