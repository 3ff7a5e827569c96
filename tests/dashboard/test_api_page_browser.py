"""The API page (``/docs``) in headless Chromium with every other host unreachable, as on an air-gapped
cluster: against a real server with auth on, a person opens ``/docs``, pastes a read token, and reads every
route of the API, grouped by tag, with a filter box. No request may leave for another host (FastAPI's
default page loads its scripts from a CDN and stays blank there). The screenshot is kept in
``test-output/api-page.png``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Route

from tests.support.browser import launch_browser, needs_chromium, new_tab
from tests.support.server import LiveServer, run_server, server_cli

pytestmark = needs_chromium
SCREENSHOT = Path(__file__).resolve().parents[2] / "test-output" / "api-page.png"
RUNS = "POST /v1/runs"
ENTRY = "GET /v1/namespaces/{namespace}/entries/{key}"
TOKEN_KEY = "xla-cache-token"  # page.js keeps the token under it in sessionStorage


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    """A server with auth on, and a read token for it."""
    data_dir = tmp_path_factory.mktemp("api-page")
    made = server_cli(data_dir, "token", "create", "--name", "docs-reader", "--role", "read")
    assert made.returncode == 0, made.stderr
    with run_server(data_dir, {"XLA_CACHE_AUTH": "on"}) as srv:
        yield srv, made.stdout.strip()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launch_browser() as launched:
        yield launched


def test_the_api_page_shows_every_route_with_no_other_host_reachable(
    server: tuple[LiveServer, str], browser: Browser
) -> None:
    srv, token = server
    own = urlsplit(srv.url).netloc
    elsewhere: list[str] = []  # every request for another host (each one aborted)
    errors: list[str] = []

    def egress(route: Route) -> None:
        if urlsplit(route.request.url).netloc == own:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort("blockedbyclient")

    tab = new_tab(browser, errors)
    try:
        tab.route("**/*", egress)
        tab.goto(f"{srv.url}/docs")
        tab.wait_for_selector("#token-form", state="visible")  # auth on: a token first
        tab.fill("#token-input", token)
        tab.click("#token-form button[type=submit]")
        tab.wait_for_selector("body[data-loaded='true']", state="attached")
        runs = tab.locator(f"[data-operation='{RUNS}']")
        shown = {
            "summary": runs.locator(".op-summary").text_content(),
            "tag": runs.locator("xpath=ancestor::section[1]").get_attribute("data-tag"),
            "description": runs.locator(".op-description").text_content() or "",
            "responses": runs.locator(".op-responses tbody tr th").all_text_contents(),
            "body": runs.locator(".op-body").text_content() or "",
        }
        entry = tab.locator(f"[data-operation='{ENTRY}']")
        parameters = entry.locator(".op-parameters tbody tr th").all_text_contents()
        entry.locator(".op-responses details > summary").first.click()  # a schema opens on demand
        schema = tab.locator(f"[data-operation='{ENTRY}'] .op-responses details[open] > .schema")
        schema_text = schema.first.text_content() or ""
        total = tab.locator("[data-operation]").count()
        tab.fill("#filter", "runs")
        filtered = {
            "runs": tab.is_visible(f"[data-operation='{RUNS}']"),
            "entry": tab.is_visible(f"[data-operation='{ENTRY}']"),
            "count": tab.text_content("#count"),
        }
        tab.fill("#filter", "")
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=SCREENSHOT, full_page=False)
        # a token kept by the dashboard in this tab opens the page without the form
        tab.goto(f"{srv.url}/docs")
        tab.wait_for_selector("body[data-loaded='true']", state="attached")
        form_again = tab.is_visible("#token-form")
    finally:
        tab.close()
    assert elsewhere == []
    assert errors == []
    assert shown["summary"] == "Report Run"
    assert shown["tag"] == "runs"
    assert "run_owned" in shown["description"]
    assert {"200", "400", "401", "403", "409"} <= set(shown["responses"])
    assert "RunReportIn" in shown["body"]
    assert {"namespace", "key"} <= set(parameters)
    assert "error" in schema_text and "detail" in schema_text  # the Error schema, opened on demand
    assert total >= 30
    assert filtered["runs"] and not filtered["entry"]
    shown_of_total = (filtered["count"] or "").split()
    assert shown_of_total[1:3] == ["of", str(total)] and 3 <= int(shown_of_total[0]) < total
    assert form_again is False


HOSTILE = '<img src="/x" onerror="document.body.dataset.owned=1">'


def test_the_api_page_shows_the_document_as_text_never_as_html(
    server: tuple[LiveServer, str], browser: Browser
) -> None:
    """Whatever the document says (a summary, a description, a parameter, a schema's name and fields) is
    shown as text: markup in it is not made into elements."""
    srv, token = server
    document = {
        "openapi": "3.1.0",
        "info": {"title": HOSTILE, "version": HOSTILE},
        "paths": {
            "/v1/x": {
                "post": {
                    "tags": [HOSTILE],
                    "summary": HOSTILE,
                    "description": f"``{HOSTILE}`` and {HOSTILE}",
                    "parameters": [{"name": HOSTILE, "in": "query", "schema": {"type": "string"}}],
                    "requestBody": {
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Bad"}}}
                    },
                    "responses": {HOSTILE: {"description": HOSTILE}},
                }
            }
        },
        "components": {"schemas": {"Bad": {"type": "object", "properties": {HOSTILE: {"enum": [HOSTILE]}}}}},
    }
    errors: list[str] = []
    tab = new_tab(browser, errors)
    try:
        tab.route(f"{srv.url}/openapi.json", lambda route: route.fulfill(json=document))
        tab.goto(f"{srv.url}/docs")
        tab.fill("#token-input", token)
        tab.click("#token-form button[type=submit]")
        tab.wait_for_selector("body[data-loaded='true']", state="attached")
        tab.click(".op-body details > summary")
        tab.wait_for_selector(".op-body details[open] ul.fields", state="attached")
        shown = tab.text_content("#api") or ""
        found = {
            "img": tab.locator("img").count(),
            "owned": tab.evaluate("document.body.dataset.owned === undefined"),
            "title": tab.text_content("#api-title"),
            "summary": tab.text_content(".op-summary"),
        }
    finally:
        tab.close()
    assert found == {"img": 0, "owned": True, "title": f"{HOSTILE}: API", "summary": HOSTILE}
    assert shown.count(HOSTILE) >= 7  # tag, summary, description twice, parameter, status and its text, field
    assert errors == []


def test_the_api_page_escapes_what_a_refusal_or_an_error_says(
    server: tuple[LiveServer, str], browser: Browser
) -> None:
    """Issue 42, item 8: the API page shows text only through page.js's doors, as the dashboard does: a
    server's detail holding a bidi override (U+202E) and a zero-width space, in a 401 (the sign-in line) and
    in a 500 (the error line), is shown escaped, never raw."""
    srv, token = server
    detail = "revoked\u202egnp.exe\u200b"
    shown_as = "revoked\\u202egnp.exe\\u200b"
    answer = {"status": 401}
    errors: list[str] = []
    tab = new_tab(browser, errors)
    try:
        tab.route(
            f"{srv.url}/openapi.json",
            lambda route: route.fulfill(status=answer["status"], json={"detail": detail}),
        )
        tab.goto(f"{srv.url}/docs")
        tab.fill("#token-input", token)
        tab.click("#token-form button[type=submit]")
        tab.wait_for_selector("#token-error:not([hidden])")
        refused = tab.text_content("#token-error") or ""
        answer["status"] = 500
        tab.evaluate(f"sessionStorage.setItem({TOKEN_KEY!r}, {token!r})")
        tab.reload()
        tab.wait_for_selector("#error:not([hidden])")
        failed = tab.text_content("#error") or ""
    finally:
        tab.close()
    assert refused == f"That token was not accepted: {shown_as} Check that you pasted all of it."
    assert failed == f"Could not read the API document: {shown_as}"
    unexpected = [e for e in errors if not e.startswith("Failed to load resource")]
    assert unexpected == []
