"""The dashboard in headless Chromium, against a real server with auth on and a few weeks of history.

A person opens ``/`` and pastes a read token into the page's form (kept in the tab's sessionStorage, sent
as a bearer header, never in a URL); the page must load with the server's numbers, draw its charts, and log
no console error. Each view has its own address (``#/runs``, ``#/runs/<id>``, ``#/graphs/<namespace>``,
``#/namespaces/<name>``) that opens it directly. The screenshots are kept in ``test-output/`` and
``/tmp/dash-*.png``. One browser serves the whole module.

The browser is Debian's ``chromium``, driven by Playwright for Python (``tests/support/browser.py``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request

from cache_protocol import SHA256_HEADER
from cache_server.index import Database
from cache_server.index.models import DailyStats
from cache_server.settings import Settings
from tests.support.api import sha
from tests.support.browser import CHROMIUM, launch_browser, needs_chromium, new_tab
from tests.support.clock import clear_of_utc_midnight
from tests.support.real_entries import real_entries
from tests.support.server import SERVER_BIN, LiveServer, run_server
from tests.support.wait import QUIET_POLL, wait_until

SCREENSHOT = Path(__file__).resolve().parents[2] / "test-output" / "dashboard.png"
NAMESPACE_SCREENSHOT = SCREENSHOT.with_name("dashboard-namespace.png")
FAST = "--xla_cpu_enable_fast_math=true"
# the fingerprints the two namespaces are registered with: one flag apart
VISION_FP = {
    "schema": 1,
    "framework": "torch_xla",
    "torch_xla_version": "2.7.0",
    "device_type": "TPU",
    "xla_flags_digest": None,
    "xla_flags": {},
}
TEXT_FP = {**VISION_FP, "xla_flags_digest": "f" * 64, "xla_flags": {"--xla_cpu_enable_fast_math": "true"}}
RUNS_SCREENSHOT = SCREENSHOT.with_name("dashboard-runs.png")
RUN_ID = "3f2c9a0e5b7d4c1e8a6f0b2d4e6c8a0f"
# Skipped on a workstation without Debian's chromium; on CI (scripts/test installs it) a missing one fails.
pytestmark = needs_chromium


def make_token(data_dir: Path, name: str, role: str, *patterns: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    env["XLA_CACHE_DATA_DIR"] = str(data_dir)
    limits = [arg for pattern in patterns for arg in ("--namespace", pattern)]
    done = subprocess.run(
        [str(SERVER_BIN), "token", "create", "--name", name, "--role", role, *limits],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def add_history(data_dir: Path, days: int = 20) -> None:
    """Earlier days of the rollup, as a server running for weeks would have them."""
    database = Database.from_settings(Settings(data_dir=data_dir))
    today = dt.datetime.now(dt.timezone.utc).date()
    try:
        with database.transaction() as session:
            for back in range(1, days + 1):
                day = today - dt.timedelta(days=back)
                hits = 40 + 7 * (days - back)
                session.add(DailyStats(day=day, namespace="vision-tpu-v5e", hits=hits, misses=30 - back % 25))
                session.add(DailyStats(day=day, namespace="text-gpu", hits=hits // 3, misses=5 + back % 4))
    finally:
        database.dispose()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    clear_of_utc_midnight(120)  # the history, today's traffic and the page's 21 days: one UTC day
    data_dir = tmp_path_factory.mktemp("dashboard")
    tokens = {role: make_token(data_dir, f"dash-{role}", role) for role in ("read", "write", "admin")}
    tokens["vision"] = make_token(data_dir, "dash-vision", "read", "vision-*")  # one namespace's reader
    # a page of one namespace: the page lists the first and loads the other when asked
    with run_server(data_dir, {"XLA_CACHE_AUTH": "on", "XLA_CACHE_STATS_PAGE_NAMESPACES": "1"}) as srv:
        write = {"Authorization": f"Bearer {tokens['write']}"}
        with httpx.Client(base_url=srv.url, headers=write, timeout=30) as http:
            labels = {"team": "vision"}
            assert http.put("/v1/namespaces/vision-tpu-v5e", json={"labels": labels}).status_code == 201
            for key, data in real_entries().items():
                headers = {SHA256_HEADER: sha(data), "X-Compile-Time-Ms": "42000"}
                assert http.put(
                    f"/v1/namespaces/vision-tpu-v5e/entries/{key}", content=data, headers=headers
                ).is_success
            for i in range(5):
                data = os.urandom(200_000 + 50_000 * i)
                response = http.put(
                    f"/v1/namespaces/text-gpu/entries/{i}",
                    content=data,
                    headers={SHA256_HEADER: sha(data)},
                )
                assert response.status_code == 201
            first = next(iter(real_entries()))
            for n in range(4):  # the last one a following job's: delivered live
                live = {"X-Live-Delivery": "1"} if n == 3 else {}
                url = f"/v1/namespaces/vision-tpu-v5e/entries/{first}"
                assert http.get(url, headers=live).status_code == 200
            assert http.get("/v1/namespaces/text-gpu/entries/nope").status_code == 404
            for namespace, fingerprint in (("vision-tpu-v5e", VISION_FP), ("text-gpu", TEXT_FP)):
                body = {"fingerprint": fingerprint, "labels": labels}
                assert http.put(f"/v1/namespaces/{namespace}", json=body).status_code == 200
            # the run of the job that compiled the real graphs (its report names them in compile order)
            run = {
                "run_id": RUN_ID,
                "namespace": "vision-tpu-v5e",
                "framework": "torch_xla",
                "host": "trainer-0",
                "started_at": dt.datetime.now(dt.timezone.utc).timestamp() - 600,
                "hits": 6,
                "misses": 4,
                "compile_seconds": 168.0,
                "new_misses": [{"key": key, "compile_seconds": 42.0} for key in real_entries()],
            }
            assert http.post("/v1/runs", json=run).status_code == 200
            admin = {"Authorization": f"Bearer {tokens['admin']}"}
            # The entries are parsed in the background: wait until all the real ones are (the first
            # graph can show up before its other variants are parsed).
            wait_until(
                lambda: (
                    sum(g["entries"] for g in http.get("/admin/stats", headers=admin).json()["top_graphs"])
                    >= len(real_entries())
                ),
                timeout=30,
                interval=QUIET_POLL,
                message="the entries were not parsed in time",
            )
        add_history(data_dir)
        yield srv, tokens


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the module's tests (each opens its own tabs)."""
    with launch_browser() as launched:
        yield launched


def sign_in(tab: Page, url: str, token: str) -> None:
    """Open ``url`` (the page asks for a token) and enter ``token`` in the form, as a person does."""
    tab.goto(url)
    tab.wait_for_selector("#token-form", state="visible")
    tab.fill("#token-input", token)
    tab.click("#token-form button[type=submit]")
    # A selector, not a function: the page's CSP forbids the eval a string predicate would need.
    tab.wait_for_selector("body[data-loaded='true']", state="attached")


def visible_views(tab: Page) -> list[str]:
    return list(
        tab.evaluate(
            """[...new Set([...document.querySelectorAll("main > section[data-view]")]
                 .filter((s) => !s.hidden).map((s) => s.dataset.view))]"""
        )
    )


def test_dashboard_loads_with_data_and_draws_its_charts(
    server: tuple[LiveServer, dict[str, str]], browser: Browser
) -> None:
    srv, tokens = server
    assert CHROMIUM is not None
    errors: list[str] = []  # console errors, uncaught exceptions and failed loads

    def console(message: ConsoleMessage) -> None:
        if message.type in ("error", "assert"):
            errors.append(f"console.{message.type}: {message.text} {message.location}")

    def failed(request: Request) -> None:
        errors.append(f"failed load: {request.url} {request.failure}")

    urls: list[str] = []  # every URL the page asked for: none may carry the token
    auth_headers: list[str | None] = []
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        tab.set_default_timeout(30_000)
        tab.on("console", console)
        tab.on("pageerror", lambda exc: errors.append(f"exception: {exc}"))
        tab.on("requestfailed", failed)
        tab.on("request", lambda r: urls.append(r.url))
        tab.on(
            "request",
            lambda r: auth_headers.append(r.headers.get("authorization")) if "/dashboard/" in r.url else None,
        )
        sign_in(tab, f"{srv.url}/", tokens["read"])
        assert tab.url == f"{srv.url}/"
        first_page = tab.evaluate(
            """(() => [document.querySelectorAll("#ns-table tbody tr").length,
                       document.getElementById("ns-count").textContent])()"""
        )
        tab.click("#ns-more")
        tab.wait_for_selector("#ns-table tbody tr:nth-child(2)", state="attached")
        more_hidden = tab.evaluate("""document.getElementById("ns-more").hidden""")
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=SCREENSHOT, full_page=True)
        tab.screenshot(path="/tmp/dash-overview.png", full_page=True)
        overview: dict[str, Any] = tab.evaluate(
            """(() => {
              // every bar label starts inside its chart (none clipped on the left)
              const labels = (id) => [...document.querySelectorAll(`#${id} text.label`)].map((t) => {
                const box = t.getBBox(); return [t.textContent, box.x >= 0, box.x + box.width];
              });
              const box = (sel) => { const r = document.querySelector(sel).getBoundingClientRect();
                                     return [r.width, r.height]; };
              return { ns: labels("ns-chart"), graphs: labels("graphs-chart"),
                       hitsBox: box("#hits-chart svg"), nsBox: box("#ns-chart svg") };
            })()"""
        )
        # long names (a namespace id, a jitted function's module) start inside the chart, cut in the middle
        long_labels: list[list[Any]] = tab.evaluate(
            """(() => {
              const names = ["torch_xla-2.7.0-tpu-v5litepod-8-0123456789abcdef0123456789abcdef",
                             "jax-0.6.2-cuda12-h100x8 / jit__train_step_with_gradient_accumulation.123", "w"];
              const fig = document.createElement("figure");  // beside the graphs chart, as wide
              fig.id = "long-labels";
              fig.className = "chart";
              document.getElementById("graphs-chart").after(fig);
              renderBars("long-labels", names, "bar-variants", (n) => n, (n) => n.length,
                         (n) => `${n.length}`, "long labels");
              return [...document.querySelectorAll("#long-labels text.label")].map((t) => {
                const box = t.getBBox();
                return [t.textContent, box.x, t.querySelector("title")?.textContent ?? null];
              });
            })()"""
        )
        tab.locator("#long-labels").screenshot(path="/tmp/dash-long-labels.png")
        tab.evaluate("""document.getElementById("long-labels").remove()""")
        tab.click("nav a[data-nav='graphs']")  # the graph view: its own address
        tab.wait_for_selector("body[data-route='#/graphs']", state="attached")
        tab.wait_for_selector("#buckets .bucket-graph table.schemes tbody tr", state="attached")
        page: dict[str, Any] = tab.evaluate(
            """(() => {
              const count = (sel) => document.querySelectorAll(sel).length;
              const total = (label) => document.querySelector(`[data-total="${label}"]`).textContent;
              const rows = (table, cells) => [
                ...document.querySelectorAll(`#buckets .bucket-graph:first-child table.${table} tr`),
              ].slice(1).map((tr) => [...tr.children].slice(0, cells).map((td) => td.textContent));
              return {
                entries: total("Entries stored"), hitRate: total("Hit rate"),
                lookups: total("Lookups found"), compiles: total("Compiles"),
                saved: total("Compile time saved"), live: total("Delivered live"),
                paid: total("Compile time paid"),
                hitBars: count("#hits-chart rect.bar-hit"), missBars: count("#hits-chart rect.bar-miss"),
                rateLine: document.querySelector("#hits-chart path.rate-line")?.getAttribute("d") ?? "",
                nsBars: count("#ns-chart rect.bar-bytes"),
                graphBars: count("#graphs-chart rect.bar-variants"),
                graphRows: [...document.querySelectorAll("#graphs-table tbody tr")].map(
                  (tr) => [...tr.children].slice(0, 5).map((td) => td.textContent)),
                nsRows: [...document.querySelectorAll("#ns-table tbody tr td:first-child")].map(
                  (td) => td.textContent),
                error: document.getElementById("error").hidden,
                bucketNamespace: document.getElementById("buckets-namespace").value,
                bucketGraphs: [...document.querySelectorAll("#buckets .bucket-graph")].map(
                  (g) => g.dataset.module),
                varying: document.querySelector("#buckets .bucket-graph .varying").textContent,
                schemeRows: rows("schemes", 3), frontierRows: rows("frontier", 3),
                choiceRows: rows("choices", 4),
                stepRows: [...document.querySelectorAll("#steps-table tbody tr")].map(
                  (tr) => [...tr.children].slice(0, 4).map((td) => td.textContent)),
                summary: document.querySelector("#buckets .bucket-graph .summary")?.textContent ?? null,
              };
            })()"""
        )
        tab.screenshot(path="/tmp/dash-graphs.png", full_page=True)
        tab.evaluate("1")  # take in any event still on its way
    finally:
        tab.close()
    assert all(tokens["read"] not in url for url in urls)  # never in a URL (so never in an access log)
    assert auth_headers and set(auth_headers) == {f"Bearer {tokens['read']}"}  # every request: the header
    assert [inside for _, inside, _ in overview["ns"] + overview["graphs"]] == [True] * 4
    assert [box_x >= 0 for _, box_x, _ in long_labels] == [True] * 3
    # the one too long for 45 % of the chart is cut in its middle (whole in its tooltip); the others fit
    assert [("…" in text, title is not None) for text, _, title in long_labels] == [
        (False, False),
        (True, True),
        (False, False),
    ]
    assert long_labels[1][0].startswith("jax-0.6.2") and long_labels[1][0].endswith("accumulation.123")
    assert sorted(label for label, _, _ in overview["graphs"]) == [
        "vision-tpu-v5e / SyncTensorsGraph.12",  # "namespace / graph": one name in two namespaces differs
        "vision-tpu-v5e / SyncTensorsGraph.15",
    ]
    assert page["entries"] == "9"
    assert page["hitRate"] == "60.0 %"  # the job's report: 6 loaded, 4 compiled
    assert page["compiles"] == "4"
    assert page["lookups"] == "4"  # the server's lookups (4 found, 1 not): never a hit rate
    # issue 46, item 6: saved is what the entries the jobs loaded cost, never the lookups' 4 x 42 s (the
    # run named no entry it loaded); the chart draws the jobs' days, not 20 days of lookups
    assert (page["saved"], page["paid"]) == ("0.0 s", "2.8 min")
    assert page["live"] == "1"
    assert page["hitBars"] == 1 and page["missBars"] == 1  # today's run: 6 loaded, 4 compiled
    assert page["rateLine"] == ""  # one day, one point: no line
    assert overview["hitsBox"][0] > 600 and overview["hitsBox"][1] > 150
    assert page["nsBars"] == 2 and overview["nsBox"][1] > 20
    assert page["graphBars"] == 2
    # ranked by compile time paid (3 x 42 s), then compiles; variants a column (issue 46, item 2)
    assert page["graphRows"][0] == ["SyncTensorsGraph.15", "vision-tpu-v5e", "2.1 min", "3", "3"]
    assert page["graphRows"][1] == ["SyncTensorsGraph.12", "vision-tpu-v5e", "42.0 s", "1", "1"]
    assert page["nsRows"] == ["text-gpu", "vision-tpu-v5e"]  # largest first
    assert first_page == [1, "1 of 2 namespaces shown."] and more_hidden is True
    # the graph view: the fixture graph's rows (2, 4 or 8 of 16) vary; each variant weighs its hits + 1, and
    # the 8-row one was read 4 times: multiples of 8 cost +(300 % + 100 % + 5 x 0) / 7 = +57 % in bytes
    assert page["bucketNamespace"] == "vision-tpu-v5e"
    assert page["bucketGraphs"] == ["SyncTensorsGraph.15", "SyncTensorsGraph.12"]
    # its steps first, the costliest first (issue 46, item 1); then each graph's summary before its tables
    assert page["stepRows"] == [
        ["SyncTensorsGraph.15", "2.1 min", "3", "3"],
        ["SyncTensorsGraph.12", "42.0 s", "1", "1"],
    ]
    assert page["summary"] is not None and page["summary"].startswith(
        "What to do: pad every varying input dimension to its maximum: 1 compile instead of 3, +57% mean"
    )
    assert page["varying"] == "Varying: p1.d0 2..8 (3 sizes)"
    assert page["schemeRows"] == [
        ["none (as now)", "3", "\u2013"],  # an en dash: no overhead
        ["next power of two", "3", "+0.0 %"],
        ["next multiple of 8", "1", "+57 %"],
        ["next multiple of 64", "1", "+1157 %"],  # (3,100 + 1,500 + 5 x 700) / 7
        ["next multiple of 128", "1", "+2414 %"],  # (6,300 + 3,100 + 5 x 1,500) / 7
    ]
    assert page["frontierRows"] == [
        ["p1.d0 max", "1", "+57 %"],
        ["p1.d0 buckets2", "2", "+14 %"],  # 2 rows padded to 4: +100 % of a weight of 1 in 7
        ["p1.d0 as is", "3", "+0.0 %"],
    ]
    assert page["choiceRows"] == [
        ["p1.d0", "as is", "3", "3"],
        ["p1.d0", "next multiple of 64", "1", "1"],
        ["p1.d0", "next multiple of 128", "1", "1"],
        ["p1.d0", "best 2 boundaries (4, 8)", "2", "2"],
        ["p1.d0", "pad to the maximum (8)", "1", "1"],
    ]
    assert page["error"] is True  # the error box stayed hidden
    assert errors == []
    assert SCREENSHOT.stat().st_size > 20_000
    assert json.loads(httpx.get(f"{srv.url}/dashboard/data").text)["error"] == "unauthorized"  # no token here


def test_namespace_page_shows_fingerprint_entries_and_the_nearest_namespace(
    server: tuple[LiveServer, dict[str, str]], browser: Browser
) -> None:
    """From the namespaces table to a namespace's page: its fingerprint, its entries and its nearest
    populated namespace, with the flag that differs and both values."""
    srv, tokens = server
    errors: list[str] = []
    tab = new_tab(browser, errors)
    try:
        sign_in(tab, f"{srv.url}/", tokens["read"])
        tab.click("#ns-table a[href='#/namespaces/text-gpu']")
        tab.wait_for_selector("body[data-route='#/namespaces/text-gpu']", state="attached")
        page: dict[str, Any] = tab.evaluate(
            """(() => {
              const rows = (id) => [...document.querySelectorAll(`#${id} tbody tr`)].map(
                (tr) => [...tr.children].map((td) => td.textContent));
              return {
                title: document.getElementById("nsp-title").textContent,
                summary: document.getElementById("nsp-summary").textContent,
                fingerprint: rows("nsp-fingerprint"), nearest: rows("nsp-nearest"),
                entries: rows("nsp-entries").length,
                overviewHidden: document.querySelector("section.overview").hidden,
              };
            })()"""
        )
        NAMESPACE_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=NAMESPACE_SCREENSHOT, full_page=True)
        tab.go_back()  # back to the overview
        tab.wait_for_selector("#namespace-page", state="hidden")
        tab.wait_for_selector("body[data-route='#/']", state="attached")
    finally:
        tab.close()
    assert page["title"] == "text-gpu" and page["overviewHidden"] is True
    assert page["summary"].startswith("torch_xla: 5 entries, 1.43 MiB, 0 hits, last used ")
    assert ["xla_flags", FAST] in page["fingerprint"]
    assert page["entries"] == 5
    (near,) = page["nearest"]
    assert near[0] == "vision-tpu-v5e" and near[1] == str(len(real_entries())) and near[3] == "1"
    assert near[4] == f"XLA_FLAGS: {FAST} (theirs: unset)"
    assert errors == []


def test_runs_view_lists_runs_and_says_why_a_run_compiled(
    server: tuple[LiveServer, dict[str, str]], browser: Browser
) -> None:
    srv, tokens = server
    errors: list[str] = []
    tab = new_tab(browser, errors)
    try:
        sign_in(tab, f"{srv.url}/", tokens["read"])
        tab.click("nav a[data-nav='runs']")
        tab.wait_for_selector("body[data-route='#/runs']", state="attached")
        listed: dict[str, Any] = tab.evaluate(
            """(() => ({
              rows: [...document.querySelectorAll("#runs-table tbody tr")].map(
                (tr) => [...tr.children].map((td) => td.textContent)),
              paid: document.querySelectorAll("#runs-chart rect.bar-paid").length,
              saved: document.querySelectorAll("#runs-chart rect.bar-saved").length,
            }))()"""
        )
        tab.click(f"#runs-table a[data-run='{RUN_ID}']")
        tab.wait_for_selector(f"body[data-route='#/runs/{RUN_ID}']", state="attached")
        misses = tab.evaluate(
            """[...document.querySelectorAll("#run-misses tbody tr")].map(
                 (tr) => [...tr.children].map((td) => td.textContent))"""
        )
        summary = tab.evaluate("""document.getElementById("run-detail-summary").textContent""")
        by_reason = tab.evaluate(
            """[...document.querySelectorAll("#run-reasons tbody tr")].map(
                 (tr) => [...tr.children].map((td) => td.textContent))"""
        )
        # text a client sent, as the page writes any cell or label: controls and bidi overrides escaped
        written = tab.evaluate(
            """[el("td", {}, "x\\u009b2J\\u202egnp.exe\\u200b").textContent,
                svgEl("text", {}, "host\\u2028two").textContent]"""
        )
        tab.locator("#run-detail").scroll_into_view_if_needed()
        tab.screenshot(path=RUNS_SCREENSHOT, full_page=True)
        tab.screenshot(path="/tmp/dash-run.png", full_page=True)
    finally:
        tab.close()
    assert len(listed["rows"]) == 1 and (listed["paid"], listed["saved"]) == (1, 1)
    row = listed["rows"][0]
    assert row[0] == RUN_ID[:12] and row[2] == "vision-tpu-v5e" and row[4] == "trainer-0"
    assert (row[5], row[6], row[7], row[8]) == ("6", "4", "60.0 %", "2.8 min")
    reasons = {cells[1]: [] for cells in misses}
    for cells in misses:
        reasons[cells[1]].append(cells[2])
    # the first shape of each graph is a new graph; the other two shapes of the first graph, new shapes
    assert sorted(reasons["SyncTensorsGraph.15"]) == ["new_graph", "new_shapes", "new_shapes"]
    assert reasons["SyncTensorsGraph.12"] == ["new_graph"]
    assert any("parameter 1 dimension 0" in cells[3] for cells in misses)
    assert "6 loaded from the cache" in summary and "4 compiles (2.8 min paid)" in summary
    assert [row[:2] for row in by_reason] == [["new_graph", "2"], ["new_shapes", "2"]] or [
        row[:2] for row in by_reason
    ] == [["new_shapes", "2"], ["new_graph", "2"]]
    assert all(row[2].strip() for row in by_reason)  # what to do about each
    assert written == ["x\\u009b2J\\u202egnp.exe\\u200b", "host\\u2028two"]
    assert errors == []
    assert RUNS_SCREENSHOT.stat().st_size > 20_000


# Any character a page would not show as itself: Unicode's Cc (but the tab and line breaks of the markup),
# Cf, Zl and Zp, as cache_protocol/text.py counts them.
RAW_INVISIBLE = r"/[\p{Cf}\p{Zl}\p{Zp}\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]/u"


def test_every_text_the_page_shows_has_its_invisible_characters_escaped(
    server: tuple[LiveServer, dict[str, str]], browser: Browser
) -> None:
    """Issue 42, item 8: a bidi override (U+202E) in a graph's name showed raw in the graph view's "The
    graph ... only" line; every text the page shows (and its tooltips) goes through one escaping function,
    and lines the page itself puts one under another keep their line breaks."""
    srv, tokens = server
    module = "SyncTensorsGraph.15\u202egnp.exe\u200b"
    address = "#/graphs/vision-tpu-v5e/" + quote(module, safe="")
    errors: list[str] = []
    tab = new_tab(browser, errors)
    try:
        sign_in(tab, f"{srv.url}/{address}", tokens["read"])
        tab.wait_for_selector(f"body[data-route='{address}']", state="attached")
        shown = tab.evaluate(
            f"""(() => {{
              const raw = {RAW_INVISIBLE};
              const texts = [];
              const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
              while (walker.nextNode()) texts.push(walker.currentNode.nodeValue);
              const titles = [...document.querySelectorAll("[title], [aria-label]")].map(
                (e) => (e.getAttribute("title") || "") + (e.getAttribute("aria-label") || ""));
              return {{
                one: document.getElementById("buckets-one").textContent,
                raw: texts.concat(titles).filter((t) => raw.test(t)),
              }};
            }})()"""
        )
        tab.goto(f"{srv.url}/#/")
        tab.wait_for_selector("body[data-route='#/']", state="attached")
        examples = tab.evaluate(
            """[...document.querySelectorAll("#graphs-table tbody tr")].map(
                 (tr) => tr.lastElementChild.textContent)"""
        )
    finally:
        tab.close()
    assert shown["one"].startswith("The graph SyncTensorsGraph.15\\u202egnp.exe\\u200b only."), shown["one"]
    assert shown["raw"] == []
    # a graph's example shapes, one a line (were shown joined by a literal "\u000a")
    assert any("\n" in cell for cell in examples) and not any("\\u000a" in cell for cell in examples)
    assert errors == []


def test_runs_view_says_when_and_by_which_policy_a_recompiled_entry_was_evicted(
    server: tuple[LiveServer, dict[str, str]], browser: Browser
) -> None:
    """A run compiled an entry an admin had deleted: its miss in the runs view is evicted, with the
    removal's time and policy (the tombstone the delete wrote)."""
    srv, tokens = server
    run_id, key, namespace = (
        "7c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f",
        "5087000000000000000000000000000001",
        "runs-evicted",
    )
    data = os.urandom(4096)
    with httpx.Client(base_url=srv.url, timeout=30) as http:
        write = {"Authorization": f"Bearer {tokens['write']}"}
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        url = f"/v1/namespaces/{namespace}/entries/{key}"
        assert http.put(url, content=data, headers={**write, SHA256_HEADER: sha(data)}).status_code == 201
        assert http.delete(url, headers=admin).is_success
        run = {
            "run_id": run_id,
            "namespace": namespace,
            "framework": "torch_xla",
            "host": "trainer-1",
            "started_at": dt.datetime.now(dt.timezone.utc).timestamp(),
            "misses": 1,
            "compile_seconds": 30.0,
            "new_misses": [{"key": key, "compile_seconds": 30.0}],
        }
        assert http.post("/v1/runs", json=run, headers=write).status_code == 200
    errors: list[str] = []
    tab = new_tab(browser, errors)
    try:
        sign_in(tab, f"{srv.url}/#/runs", tokens["read"])
        tab.click(f"#runs-table a[data-run='{run_id}']")
        tab.wait_for_selector(f"body[data-route='#/runs/{run_id}']", state="attached")
        misses = tab.evaluate(
            """[...document.querySelectorAll("#run-misses tbody tr")].map(
                 (tr) => [...tr.children].map((td) => td.textContent))"""
        )
    finally:
        tab.close()
    ((shown_key, _module, reason, why, todo, spent),) = misses
    assert todo.startswith("raise the namespace's quota")
    assert (shown_key, reason, spent) == (key, "evicted", "30.0 s")
    assert why.startswith("stored once, removed ") and why.endswith(" UTC by policy admin")
    assert errors == []


def refused_loads(errors: list[str], *statuses: int) -> list[str]:
    """The console errors left once the browser's own lines for the expected refusals are set aside."""
    expected = tuple(f"status of {status} " for status in statuses)
    return [
        e for e in errors if not (e.startswith("Failed to load resource") and any(x in e for x in expected))
    ]


def test_the_token_form_says_when_a_token_is_wrong_and_keeps_a_right_one_for_the_session(
    server: tuple[LiveServer, dict[str, str]], browser: Browser
) -> None:
    srv, tokens = server
    errors: list[str] = []
    tab = new_tab(browser, errors)
    try:
        tab.goto(f"{srv.url}/#/runs")  # an address a colleague shared: the form comes first
        tab.wait_for_selector("#token-form", state="visible")
        before = {"views": visible_views(tab), "nav": tab.is_visible("#nav")}
        tab.fill("#token-input", "xlc_000000000000_" + "A" * 43)
        tab.click("#token-form button[type=submit]")
        tab.wait_for_selector("#token-error", state="visible")
        wrong = tab.text_content("#token-error")
        tab.screenshot(path="/tmp/dash-signin-wrong.png", full_page=True)
        stored_wrong = tab.evaluate("sessionStorage.length")
        tab.fill("#token-input", tokens["read"])
        tab.click("#token-form button[type=submit]")
        tab.wait_for_selector("body[data-route='#/runs']", state="attached")  # the shared view, at once
        signed_in = {
            "views": visible_views(tab),
            "rows": tab.locator("#runs-table tbody tr").count(),
            "who": tab.text_content("#who"),
            "form": tab.is_visible("#sign-in"),
            "error": tab.is_visible("#token-error"),
        }
        tab.reload()  # the same tab: sessionStorage keeps the token
        tab.wait_for_selector("body[data-route='#/runs']", state="attached")
        after_reload = {"form": tab.is_visible("#sign-in"), "views": visible_views(tab)}
        tab.click("#sign-out")
        tab.wait_for_selector("#token-form", state="visible")
        signed_out = {
            "stored": tab.evaluate("sessionStorage.length"),
            "note": tab.text_content("#token-note"),
            "views": visible_views(tab),
        }
        tab.reload()
        tab.wait_for_selector("#token-form", state="visible")
        tab.screenshot(path="/tmp/dash-signin.png", full_page=True)
    finally:
        tab.close()
    assert before == {"views": [], "nav": False}
    assert wrong is not None and "not accepted" in wrong and "The token is not valid." in wrong
    assert stored_wrong == 0  # a wrong token is not kept
    assert signed_in["views"] == ["runs"] and signed_in["rows"] >= 1
    assert signed_in["who"] == "Signed in as dash-read (read)"
    assert signed_in["form"] is False and signed_in["error"] is False
    assert after_reload == {"form": False, "views": ["runs"]}
    assert signed_out["stored"] == 0 and signed_out["views"] == []
    assert signed_out["note"] is not None and signed_out["note"].startswith("Signed out")
    assert refused_loads(errors, 401) == []  # only the wrong token's refusal


def test_each_view_opens_at_its_own_address_and_back_and_forward_move_between_them(
    server: tuple[LiveServer, dict[str, str]], browser: Browser
) -> None:
    srv, tokens = server
    module = "SyncTensorsGraph.15"
    # a few more runs over three UTC days, for the runs chart's time axis
    now = dt.datetime.now(dt.timezone.utc)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    starts = [midnight - dt.timedelta(days=1, hours=12), midnight - dt.timedelta(minutes=50)]
    starts += [midnight - dt.timedelta(minutes=20), now - dt.timedelta(seconds=60)]
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {tokens['write']}"}) as http:
        for n, started in enumerate(starts):
            run = {
                "run_id": f"{n:032x}",
                "namespace": "text-gpu",
                "framework": "torch_xla",
                "host": f"trainer-{n}",
                "started_at": started.timestamp(),
                "hits": 3,
                "misses": 1,
                "compile_seconds": 20.0 + 15 * n,
            }
            assert http.post("/v1/runs", json=run).status_code == 200
    errors: list[str] = []
    shown: dict[str, Any] = {}
    addresses = {
        "#/": ["overview"],
        "#/runs": ["runs"],
        f"#/runs/{RUN_ID}": ["runs"],
        "#/graphs/vision-tpu-v5e": ["graphs"],
        f"#/graphs/vision-tpu-v5e/{module}": ["graphs"],
        "#/namespaces/text-gpu": ["namespace"],
    }
    for address in addresses:
        tab = new_tab(browser, errors)  # a new tab opened at the address
        try:
            sign_in(tab, f"{srv.url}/{address}", tokens["read"])
            tab.wait_for_selector(f"body[data-route='{address}']", state="attached")
            shown[address] = tab.evaluate(
                """(() => ({
                  run: document.getElementById("run-detail").hidden ? null
                    : document.getElementById("run-detail-title").textContent,
                  graphs: [...document.querySelectorAll("#buckets .bucket-graph")].map(
                    (g) => g.dataset.module),
                  namespace: document.getElementById("namespace-page").hidden ? null
                    : document.getElementById("nsp-title").textContent,
                  current: document.querySelector("nav a[aria-current='page']")?.dataset.nav ?? null,
                  ticks: [...document.querySelectorAll("#runs-chart text.tick-time")].map(
                    (t) => t.textContent),
                  days: [...document.querySelectorAll("#runs-chart text.tick-day")].map(
                    (t) => t.textContent),
                }))()"""
            )
            shown[address]["views"] = visible_views(tab)
            name = address.strip("#/").replace("/", "-") or "overview"
            tab.screenshot(path=f"/tmp/dash-view-{name}.png", full_page=True)
        finally:
            tab.close()
    tab = new_tab(browser, errors)
    try:
        sign_in(tab, f"{srv.url}/", tokens["read"])
        tab.click("nav a[data-nav='runs']")
        tab.wait_for_selector("body[data-route='#/runs']", state="attached")
        tab.click(f"#runs-table a[data-run='{RUN_ID}']")
        tab.wait_for_selector(f"body[data-route='#/runs/{RUN_ID}']", state="attached")
        tab.click(f"#run-misses a[data-graph='{module}']")  # a graph's bucketing, from the run
        tab.wait_for_selector(f"body[data-route='#/graphs/vision-tpu-v5e/{module}']", state="attached")
        tab.go_back()
        tab.wait_for_selector(f"body[data-route='#/runs/{RUN_ID}']", state="attached")
        tab.go_back()
        tab.wait_for_selector("body[data-route='#/runs']", state="attached")
        detail_hidden = tab.evaluate("""document.getElementById("run-detail").hidden""")
        tab.go_forward()
        tab.wait_for_selector(f"body[data-route='#/runs/{RUN_ID}']", state="attached")
        tab.click("#run-detail-summary")  # still there: the view is drawn again, not a blank page
        tab.click("#runs-table a[data-namespace='vision-tpu-v5e']")  # a namespace, from the runs
        tab.wait_for_selector("body[data-route='#/namespaces/vision-tpu-v5e']", state="attached")
        tab.goto(f"{srv.url}/#namespace=text-gpu")  # a namespace page's old address still opens it
        tab.wait_for_selector("body[data-route='#/namespaces/text-gpu']", state="attached")
    finally:
        tab.close()
    for address, views in addresses.items():
        assert shown[address]["views"] == views, address
    assert shown["#/"]["current"] == "overview" and shown["#/runs"]["current"] == "runs"
    assert shown["#/runs"]["run"] is None and shown[f"#/runs/{RUN_ID}"]["run"] == f"Run {RUN_ID}"
    assert shown["#/graphs/vision-tpu-v5e"]["graphs"] == [module, "SyncTensorsGraph.12"]
    assert shown[f"#/graphs/vision-tpu-v5e/{module}"]["graphs"] == [module]
    assert shown["#/namespaces/text-gpu"]["namespace"] == "text-gpu"
    # the time axis: hours:minutes under each run, the date under the first and wherever it changes
    ticks, days = shown["#/runs"]["ticks"], shown["#/runs"]["days"]
    assert len(ticks) >= 5 and all(len(t) == 5 and t[2] == ":" for t in ticks), ticks
    assert ticks[:3] == ["12:00", "23:10", "23:40"]
    assert len(days) == 3 and len(set(days)) == 3, days  # three days, each named once
    assert detail_hidden is True
    assert errors == []


def test_a_scoped_read_token_sees_its_namespace_and_not_the_others(
    server: tuple[LiveServer, dict[str, str]], browser: Browser
) -> None:
    """A read token limited to vision-*: its overview lists its namespace; its runs, graphs and namespace
    page are those of vision-tpu-v5e; another namespace's page is refused with the reason."""
    srv, tokens = server
    errors: list[str] = []
    tab = new_tab(browser, errors)
    try:
        sign_in(tab, f"{srv.url}/", tokens["vision"])
        tab.wait_for_selector("body[data-view='mine']", state="attached")
        mine = {
            "views": visible_views(tab),
            "rows": tab.evaluate(
                """[...document.querySelectorAll("#mine-table tbody tr td:first-child")].map(
                     (td) => td.textContent)"""
            ),
            "who": tab.text_content("#who"),
        }
        tab.screenshot(path="/tmp/dash-scoped.png", full_page=True)
        tab.click("nav a[data-nav='runs']")
        tab.wait_for_selector("body[data-route='#/runs']", state="attached")
        runs = tab.evaluate(
            """[...document.querySelectorAll("#runs-table tbody tr")].map(
                 (tr) => tr.children[2].textContent)"""
        )
        tab.click("nav a[data-nav='graphs']")
        tab.wait_for_selector("body[data-route='#/graphs']", state="attached")
        graphs = tab.evaluate(
            """(() => ({
              choices: [...document.querySelectorAll("#buckets-namespace option")].map((o) => o.value),
              graphs: [...document.querySelectorAll("#buckets .bucket-graph")].map((g) => g.dataset.module),
            }))()"""
        )
        tab.goto(f"{srv.url}/#/namespaces/vision-tpu-v5e")
        tab.wait_for_selector("body[data-route='#/namespaces/vision-tpu-v5e']", state="attached")
        tab.goto(f"{srv.url}/#/namespaces/text-gpu")
        tab.wait_for_selector("#error", state="visible")
        refused = tab.text_content("#error")
        left_shown = visible_views(tab)  # not the namespace page shown before, under this address
        tab.screenshot(path="/tmp/dash-scoped-refused.png", full_page=True)
    finally:
        tab.close()
    assert mine["views"] == ["mine"] and mine["rows"] == ["vision-tpu-v5e"]
    assert mine["who"] == "Signed in as dash-vision (read, namespaces vision-*)"
    assert runs and set(runs) == {"vision-tpu-v5e"}  # not text-gpu's nor runs-evicted's
    assert graphs == {"choices": ["vision-tpu-v5e"], "graphs": ["SyncTensorsGraph.15", "SyncTensorsGraph.12"]}
    assert refused is not None and "Could not load the namespace text-gpu" in refused
    assert "limited to namespaces matching vision-*" in refused
    assert left_shown == []
    assert refused_loads(errors, 403) == []
