"""The API page (``/docs``) is served by the server itself: nothing it loads comes from another host.

The servers run on air-gapped clusters and behind strict egress rules, where FastAPI's default page (its
scripts and stylesheet from a CDN) stays blank. The page is the server's own: open, as the dashboard's
is (it holds no data; with auth on its script asks for a token and reads ``/openapi.json`` with it), under
the dashboard's Content-Security-Policy. The browser test (``tests/dashboard/test_api_page_browser.py``)
opens it with every other host blocked.
"""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urlsplit

from fastapi.testclient import TestClient

from cache_server.settings import Settings
from tests.support.api import bearer

HTML = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
DASHBOARD_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class _Loads(HTMLParser):
    """What a page loads (``<script src>``, ``<link href>``, ``<img src>``) and what the CSP would block
    (inline scripts, ``style`` attributes, ``on*`` handlers, ``<style>`` elements)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []
        self._script_without_src = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        for wanted_tag, attribute in (("script", "src"), ("link", "href"), ("img", "src")):
            if tag == wanted_tag and named.get(attribute):
                self.urls.append(str(named[attribute]))
        if tag == "script" and not named.get("src"):
            self._script_without_src = True
        if tag == "style":
            self.inline.append("<style>")
        self.inline += [f"{tag} {name}" for name in named if name == "style" or name.startswith("on")]

    def handle_data(self, data: str) -> None:
        if self._script_without_src and data.strip():
            self.inline.append(f"inline script: {data.strip()[:60]}")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script_without_src = False


def _loads(html: str) -> _Loads:
    parser = _Loads()
    parser.feed(html)
    parser.close()
    return parser


def test_the_api_page_loads_nothing_from_another_host(auth_client: TestClient) -> None:
    """Every script, stylesheet and image of ``/docs`` is a path on this server, each is served, and the
    page and its assets carry the dashboard's CSP (no inline script, no other host)."""
    page = auth_client.get("/docs", headers=HTML)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == DASHBOARD_CSP
    assert page.headers["x-content-type-options"] == "nosniff"
    found = _loads(page.text)
    assert found.inline == []
    scripts = [url for url in found.urls if url.endswith(".js")]
    assert scripts and any(url.endswith(".css") for url in found.urls)
    for url in found.urls:
        parts = urlsplit(url)
        if parts.scheme == "data":  # the empty icon: no request at all (img-src allows data:)
            continue
        assert (parts.scheme, parts.netloc) == ("", ""), url
        assert url.startswith("/") and not url.startswith("//"), url
        asset = auth_client.get(url)
        assert asset.status_code == 200, url
        assert asset.headers["content-security-policy"] == DASHBOARD_CSP, url
        assert asset.content, url
        assert "://" not in asset.text, url  # nor does a script or the stylesheet name another host
    assert 'id="token-form"' in page.text and 'type="password"' in page.text


def test_the_api_page_is_open_and_the_document_it_reads_is_not(
    auth_client: TestClient, tokens: dict[str, str]
) -> None:
    """The page holds no data (it asks for a token, as the dashboard does); the document it reads needs
    a read token, and FastAPI's own pages (``/redoc``, Swagger's assets) are not served."""
    assert auth_client.get("/docs").status_code == 200
    assert 'data-auth="on"' in auth_client.get("/docs").text
    assert auth_client.get("/openapi.json").status_code == 401
    document = auth_client.get("/openapi.json", headers=bearer(tokens["read"]))
    assert document.status_code == 200 and "/v1/runs" in document.json()["paths"]
    for path in ("/redoc", "/docs/oauth2-redirect", "/static/swagger-ui.css", "/static/docs.html"):
        assert auth_client.get(path).status_code == 404, path


def test_the_api_page_says_auth_is_off_when_it_is(settings: Settings, client: TestClient) -> None:
    """With auth off the page reads the document at once (no form shown first)."""
    assert settings.auth is False
    page = client.get("/docs", headers=HTML)
    assert page.status_code == 200 and '<body data-auth="off"' in page.text
    assert client.get("/openapi.json").status_code == 200
