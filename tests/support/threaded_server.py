"""An ASGI app served over real HTTP by uvicorn, on a thread of the test process and a free loopback port.

For a server built from parts a ``serve`` process cannot be given (a blob store with test credentials, a
shifted clock), reached by clients that need a URL (schemathesis, a load generator):

    with serve_in_thread(create_app(settings, services)) as url:
        httpx.get(f"{url}/healthz")

uvicorn runs the app's lifespan (its services start and stop with it), as under ``xla-cache-server serve``.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

from tests.support.wait import wait_until

__all__ = ["serve_in_thread"]


@contextmanager
def serve_in_thread(app: ASGIApp, *, startup_timeout: float = 30.0) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # reported to the test instead of dying with the thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: server.started or failure or not thread.is_alive(),
            timeout=startup_timeout,
            message="uvicorn did not start",
        )
        if failure or not server.started:
            raise RuntimeError(f"uvicorn did not start: {failure}")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()
