"""Headless Chromium for the browser tests: Debian's ``chromium``, driven by Playwright for Python.

``scripts/test`` installs the browser; Playwright is told where it is, so no browser of Playwright's own
is downloaded or used. A workstation without it skips the browser tests (``needs_chromium``); on CI a
missing browser fails them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

__all__ = ["CHROMIUM", "launch_browser", "needs_chromium", "new_tab"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"), reason="Debian's chromium is not installed"
)


@contextmanager
def launch_browser() -> Iterator[Browser]:
    """One headless Chromium (each test opens its own tabs), closed afterwards."""
    assert CHROMIUM is not None, "Debian's chromium is not installed (scripts/test installs it)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, timeout=60_000)
        try:
            yield launched
        finally:
            launched.close()


def new_tab(browser: Browser, errors: list[str]) -> Page:
    """A tab of its own (its own sessionStorage) that records console errors and uncaught exceptions; its
    clock reads UTC, as the server's days do."""
    tab = browser.new_page(viewport={"width": 1280, "height": 900}, timezone_id="UTC")
    tab.set_default_timeout(30_000)
    tab.on("console", lambda m: errors.append(m.text) if m.type in ("error", "assert") else None)
    tab.on("pageerror", lambda exc: errors.append(f"exception: {exc}"))
    return tab
