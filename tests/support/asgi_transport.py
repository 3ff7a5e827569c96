"""A synchronous httpx transport into an ASGI app running in this process, recording what it is sent.

``httpx.ASGITransport`` is async-only and the client (``xla_cache.http.api.CacheApi``) is a synchronous
``httpx.Client``: this transport hands each request to an ``httpx.ASGITransport`` on the event loop of a
blocking portal, from whichever thread the client calls it. Give it the portal of a running
``fastapi.testclient.TestClient`` (``TestClient.portal``, set inside ``with TestClient(app)``), so that the
requests meet the app on the loop its lifespan started it on:

    with TestClient(app) as test_client:
        transport = PortalASGITransport(app, test_client.portal)
        api = CacheApi("http://testserver", transport=transport)
        ...
        transport.requests  # every request the client sent, in order

Bodies are read whole on the way in and on the way out (the responses of a test app are small).
"""

from __future__ import annotations

import threading
from urllib.parse import unquote

import httpx
from anyio.from_thread import BlockingPortal
from starlette.types import ASGIApp

from tests.support.http_stub import Recorded

__all__ = ["PortalASGITransport"]


class PortalASGITransport(httpx.BaseTransport):
    """Sends each request to ``app`` through ``httpx.ASGITransport`` on ``portal``'s event loop."""

    def __init__(self, app: ASGIApp, portal: BlockingPortal) -> None:
        self._asgi = httpx.ASGITransport(app=app)
        self._portal = portal
        self._lock = threading.Lock()
        self.requests: list[Recorded] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()  # a streamed upload becomes bytes, which the async transport can send too
        with self._lock:
            self.requests.append(
                Recorded(
                    method=request.method,
                    path=unquote(request.url.path),
                    query=dict(request.url.params.multi_items()),  # the last value of each
                    headers={name.lower(): value for name, value in request.headers.items()},
                    body=body,
                )
            )

        async def send() -> tuple[httpx.Response, bytes]:
            response = await self._asgi.handle_async_request(request)
            return response, b"".join([chunk async for chunk in response.aiter_raw()])  # closes it

        response, content = self._portal.call(send)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=httpx.ByteStream(content),
            extensions=response.extensions,
        )
