"""The dashboard's run page at the CLI's level (issue 46, item 7), in headless Chromium against a real server.

The issue's probe: a run of 152 compiles showed 100 of them, no pager, no what-to-do, and flags and example
shapes with a literal ``\\u000a``. Now every compile is reachable a page at a time (the server may end a page
early: the next starts after the last listed), the count of each reason stands with what to do about it,
each compile says what to do and links to its graph's report, and text with newlines is shown as lines.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser

from cache_protocol.runs import MISS_ADVICE
from tests.support.browser import launch_browser, needs_chromium, new_tab
from tests.support.server import LiveServer, run_server

pytestmark = needs_chromium
RUN_ID = "9d1e0c0ffee04a6b8c2d4e6f8a0b2c4d"
COMPILES = 152  # as the run
MODULES = ("jit_fuse", "jit_step")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data_dir: Path = tmp_path_factory.mktemp("run-page")
    with run_server(data_dir) as srv:
        misses = [
            {"key": f"{n:040d}", "module": MODULES[n % 2] if n % 3 else None, "compile_seconds": 0.5}
            for n in range(COMPILES)
        ]
        run = {
            "run_id": RUN_ID,
            "namespace": "fuse-cpu",
            "framework": "torch_xla",
            "host": "trainer-0",
            "started_at": time.time() - 600,
            "hits": 10,
            "misses": COMPILES,
            "compile_seconds": 76.0,
            "new_misses": misses,
        }
        assert httpx.post(f"{srv.url}/v1/runs", json=run, timeout=60).status_code == 200
        yield srv


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launch_browser() as launched:
        yield launched


PAGE_STATE = """(() => ({
  keys: [...document.querySelectorAll("#run-misses tbody tr td:first-child")].map((td) => td.textContent),
  todo: [...document.querySelectorAll("#run-misses tbody tr td:nth-child(5)")].map((td) => td.textContent),
  links: [...document.querySelectorAll("#run-misses a[data-graph]")].map((a) => a.getAttribute("href")),
  note: document.getElementById("run-page-note").textContent,
  next: !document.getElementById("run-next").hidden,
  prev: !document.getElementById("run-prev").hidden,
  reasons: [...document.querySelectorAll("#run-reasons tbody tr")].map(
    (tr) => [...tr.children].map((td) => td.textContent)),
  text: document.getElementById("run-detail").innerText,
}))()"""


def test_every_compile_is_paged_with_its_reason_counts_and_what_to_do(
    server: LiveServer, browser: Browser
) -> None:
    errors: list[str] = []
    tab = new_tab(browser, errors)
    pages: list[dict[str, Any]] = []
    try:
        tab.goto(f"{server.url}/#/runs/{RUN_ID}")
        tab.wait_for_selector(f"body[data-run-shown='{RUN_ID}'][data-run-offset='0']", state="attached")
        pages.append(tab.evaluate(PAGE_STATE))
        while pages[-1]["next"]:
            offset = len(pages[-1]["keys"]) + sum(len(p["keys"]) for p in pages[:-1])
            tab.click("#run-next")
            tab.wait_for_selector(f"body[data-run-offset='{offset}']", state="attached")
            pages.append(tab.evaluate(PAGE_STATE))
        tab.click("#run-prev")  # and back
        tab.wait_for_selector("body[data-run-offset='0']", state="attached")
    finally:
        tab.close()
    keys = [key for page in pages for key in page["keys"]]
    assert keys == [f"{n:040d}" for n in range(COMPILES)]  # every compile, in the order reported, once
    assert len(pages) == 2 and pages[0]["note"].startswith(f"Compiles 1 to 100 of {COMPILES}.")
    assert pages[1]["note"].startswith(f"Compiles 101 to {COMPILES} of {COMPILES}.") and pages[1]["prev"]
    # the counts per reason, over every compile once both pages were listed, each with what to do
    last = {row[0]: row for row in pages[-1]["reasons"]}
    assert sum(int(row[1]) for row in last.values()) == COMPILES
    assert all(row[2] == MISS_ADVICE[reason] for reason, row in last.items())  # type: ignore[index]
    assert all(todo in MISS_ADVICE.values() for page in pages for todo in page["todo"])
    # a compile whose module is known links to that graph's report
    assert f"#/graphs/fuse-cpu/{MODULES[1]}" in pages[0]["links"]
    assert not any("\\u000a" in page["text"] for page in pages)  # newlines are lines, never escapes
    assert errors == []
