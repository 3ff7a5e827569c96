"""Headless Chromium driven over the DevTools protocol: load a page, evaluate, screenshot, collect errors."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

from tests.support.server import stop_process

__all__ = ["Browser", "chromium_path", "headless_chromium"]

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,900",
    "--remote-debugging-port=0",
]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One page of a headless Chromium. ``errors`` collects console errors, exceptions and failed loads."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self.errors: list[str] = []

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self._ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self._event(message)

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append(
                f"exception: {params['exceptionDetails'].get('text')} {params['exceptionDetails']}"
            )
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(
                "console.error: " + " ".join(str(a.get("value")) for a in params.get("args", []))
            )
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating {expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def wait_for(self, expression: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression} never became true; errors so far: {self.errors}")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> None:
        height = self.evaluate("document.documentElement.scrollHeight")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=1280,
            height=int(height),
            deviceScaleFactor=1,
            mobile=False,
        )
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))


@contextmanager
def headless_chromium(binary: str) -> Iterator[Browser]:
    """Start Chromium with a throwaway profile, attach to its first page, stop it afterwards."""
    profile = Path(tempfile.mkdtemp(prefix="xla-cache-chromium-"))
    process = subprocess.Popen(
        [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("Chromium did not start its DevTools endpoint")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list").json() if t["type"] == "page"]
        with connect(pages[0]["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024) as ws:
            browser = Browser(ws)
            for domain in ("Page", "Runtime", "Log"):
                browser.call(f"{domain}.enable")
            yield browser
    finally:
        stop_process(process)
        shutil.rmtree(profile, ignore_errors=True)
