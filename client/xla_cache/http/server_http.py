"""The HTTP plumbing every call to the cache server goes through: one pooled httpx client per server, each
wait bounded by what is left of a :class:`Deadline`, and every failure turned into a
:class:`~xla_cache.errors.ServerProblem` that names why (the server's own error code and detail, or what
kept it from answering). :class:`~xla_cache.http.api.CacheApi` (a job's calls) and
:class:`~xla_cache.http.admin_api.AdminApi` (the operators') are built on it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import ssl
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from cache_protocol import UPLOADER_HEADER
from xla_cache.errors import ClientError, ServerError, ServerUnavailable
from xla_cache.http.deadline import Deadline
from xla_cache.http.lean_httpx import httpx
from xla_cache.server_url import normalize_server, server_url_problem, token_problem

__all__ = ["USER_AGENT", "ServerHttp"]

USER_AGENT = "xla-cache-client/0.1"
_Http = TypeVar("_Http", bound="ServerHttp")


@functools.lru_cache(maxsize=4)
def _trust(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """httpx's own default context (certifi's roots, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), made once per
    process: loading the roots takes 20-25 ms, which every warm paid before its first request."""
    return httpx.create_ssl_context()


class ServerHttp:
    """Requests to one cache server (``server``: its base URL, normalised once here), with ``token`` as the
    bearer (a :class:`ClientError` if it cannot travel in a header). A context manager (closes its
    connections) or :meth:`close` it."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.server = normalize_server(server)
        headers = {"User-Agent": USER_AGENT, UPLOADER_HEADER: f"{socket.gethostname()}:{os.getpid()}"}
        if token:
            problem = token_problem(token)
            if problem:
                raise ClientError(f"the token {problem}")
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.server,
            headers=headers,
            transport=transport,
            follow_redirects=True,
            timeout=30.0,
            verify=_trust(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")),
        )

    def close(self) -> None:
        """Close pooled connections."""
        self._http.close()

    def __enter__(self: _Http) -> _Http:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _timeout(self, deadline: Deadline) -> httpx.Timeout:
        return httpx.Timeout(deadline.wait_limit())

    def _unavailable(self, what: str, exc: httpx.HTTPError, deadline: Deadline) -> ServerUnavailable:
        if isinstance(exc, httpx.TimeoutException):
            return ServerUnavailable(
                f"{self.server} did not answer {what} in time ({type(exc).__name__}; the client's timeout is "
                f"{deadline.seconds:g} s)"
            )
        if isinstance(exc, httpx.ConnectError):
            return ServerUnavailable(f"cannot connect to {self.server} for {what} ({exc})")
        return ServerUnavailable(f"{self.server} failed during {what} ({type(exc).__name__}: {exc})")

    def _error(self, what: str, response: httpx.Response) -> ServerError:
        code = detail = ""
        with contextlib.suppress(Exception):
            response.read()
            body = response.json()
            if isinstance(body, dict):
                code = str(body.get("error", ""))
                detail = str(body.get("detail", ""))
        if not detail:
            with contextlib.suppress(Exception):
                detail = response.text[:200].strip()
        reason = f"{self.server} answered {what} with HTTP {response.status_code}"
        if code:
            reason += f" {code}"
        if detail:
            reason += f": {detail}"
        if response.status_code == 404 and (code in ("", "not_found")):
            # Not one of the API's own answers (those name what was not found): no such path here.
            problem = server_url_problem(self.server)
            reason += (
                f" ({problem})"
                if problem
                else f" (is {self.server} the cache server's base URL, and is the server this version?)"
            )
        return ServerError(reason, status=response.status_code, code=code, detail=detail)

    def _call(
        self,
        method: str,
        path: str,
        what: str,
        deadline: Deadline,
        *,
        ok: Iterable[int] = (200, 201),
        **kwargs: Any,
    ) -> httpx.Response:
        if deadline.expired():
            raise ServerUnavailable(
                f"no time left for {what} (the client's timeout is {deadline.seconds:g} s)"
            )
        try:
            response = self._http.request(method, path, timeout=self._timeout(deadline), **kwargs)
        except httpx.HTTPError as exc:
            raise self._unavailable(what, exc, deadline) from exc
        if response.status_code not in ok:
            raise self._error(what, response)
        return response

    def _json(self, response: httpx.Response, what: str) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise ServerError(
                f"{self.server} answered {what} with a body that is not JSON",
                status=response.status_code,
            ) from exc

    @contextlib.contextmanager
    def _stream(
        self, method: str, path: str, what: str, deadline: Deadline, **kwargs: Any
    ) -> Iterator[tuple[httpx.Response, Iterator[bytes]]]:
        if deadline.expired():
            raise ServerUnavailable(
                f"no time left for {what} (the client's timeout is {deadline.seconds:g} s)"
            )
        try:
            with self._http.stream(method, path, timeout=self._timeout(deadline), **kwargs) as response:
                if response.status_code != 200:
                    raise self._error(what, response)
                yield response, self._chunks(response, what, deadline)
        except httpx.HTTPError as exc:
            raise self._unavailable(what, exc, deadline) from exc

    def _chunks(self, response: httpx.Response, what: str, deadline: Deadline) -> Iterator[bytes]:
        for chunk in response.iter_bytes():
            if deadline.expired():
                raise ServerUnavailable(
                    f"{self.server} was too slow sending {what} "
                    f"(the client's timeout is {deadline.seconds:g} s)"
                )
            yield chunk
