"""The graph view says how many of a namespace's entries a prefill stored and how many unverified (issue 44),
in headless Chromium against a real server: real entries uploaded as a prefill uploads them (``X-Uploader:
prefill ...``, some ``unverified``), one uploaded by a job; a namespace with none prefilled says nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser

from cache_protocol import SHA256_HEADER, UPLOADER_HEADER
from cache_protocol.prefill import prefill_uploader
from tests.support.api import sha
from tests.support.browser import launch_browser, needs_chromium, new_tab
from tests.support.real_entries import real_entries
from tests.support.server import LiveServer, run_server

pytestmark = needs_chromium
PREFILLED = "fuse-tpu-v5e-prefilled"
PLAIN = "fuse-cpu-plain"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data_dir: Path = tmp_path_factory.mktemp("prefilled-view")
    with run_server(data_dir) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        entries = list(real_entries().items())
        assert len(entries) >= 3
        for namespace in (PREFILLED, PLAIN):
            assert http.put(f"/v1/namespaces/{namespace}", json={"labels": {}}).is_success
        uploaders = [
            prefill_uploader("cpu-host-1", 41, "v5e:2x2", unverified=True),
            prefill_uploader("cpu-host-1", 41, "v5e:2x2", unverified=True),
            prefill_uploader("cpu-host-2", 42, None, unverified=False),
        ]
        for n, (key, data) in enumerate(entries):
            headers = {SHA256_HEADER: sha(data)}
            if n < len(uploaders):
                headers[UPLOADER_HEADER] = uploaders[n]
            assert http.put(
                f"/v1/namespaces/{PREFILLED}/entries/{key}", content=data, headers=headers
            ).is_success
            assert http.put(
                f"/v1/namespaces/{PLAIN}/entries/{key}",
                content=data,
                headers=headers | {UPLOADER_HEADER: "a job"},
            ).is_success
        yield srv


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launch_browser() as launched:
        yield launched


def shown(server: LiveServer, browser: Browser, namespace: str) -> dict[str, str | None]:
    errors: list[str] = []
    tab = new_tab(browser, errors)
    try:
        tab.goto(f"{server.url}/#/graphs/{namespace}")
        tab.wait_for_selector(f"#buckets[data-shown='{namespace}']", state="attached")
        found = tab.evaluate(
            """(() => {
              const line = document.getElementById("buckets-prefilled");
              return { line: line ? line.textContent : null, cls: line ? line.className : null };
            })()"""
        )
    finally:
        tab.close()
    assert errors == []
    return dict(found)


def test_the_graph_view_says_how_many_entries_were_prefilled_and_how_many_unverified(
    server: LiveServer, browser: Browser
) -> None:
    found = shown(server, browser, PREFILLED)
    assert found["line"] == (
        f"3 entries of {PREFILLED} prefilled (compiled ahead of the target job), 2 of them unverified: "
        "published without a real run of the namespace to compare the target's key components with."
    )
    assert found["cls"] == "prefilled unverified"
    assert shown(server, browser, PLAIN) == {"line": None, "cls": None}
