"""How the GCS backend talks to Google Cloud Storage: one authorised HTTP session, the endpoint, the retry
policy and timeouts, and the translation of whatever fails into
:class:`~cache_server.errors.StorageUnavailable`.

Every request of the backend (uploads, reads, listing) goes through one :class:`Transport`, so they share the
connection pool, retry alike and fail with the same messages. The backend speaks the JSON API itself rather
than through google-cloud-storage's client: the client offers no public way to set the session's pool size,
and since 3.x it fetches bucket metadata in the background to label traces, a request that needs
``storage.buckets.get``, which a role limited to objects lacks.

The requests of small blobs (a whole read, a one-request upload) are many and cheap, so what a request costs
in CPU matters as much as its round trip: through ``requests`` one costs about 0.8 ms of CPU, sent straight
through the same connection pool with urllib3 (:meth:`Transport.send`) about 0.3 ms. Those go the short way,
with the same credentials, retry policy, timeouts and errors; everything else goes through the session.
"""

from __future__ import annotations

import functools
import http.client
import logging
import os
import random
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import google.auth
import requests
import urllib3
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import Credentials, with_scopes_if_required
from google.auth.transport.requests import AuthorizedSession
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from requests.utils import get_environ_proxies

from cache_server.errors import StorageUnavailable

__all__ = [
    "VENDOR_ERRORS",
    "HttpError",
    "Transport",
    "default_credentials",
    "describe",
    "emulator_endpoint",
    "is_transient",
]

log = logging.getLogger(__name__)

SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
PUBLIC_ENDPOINT = "https://storage.googleapis.com"
MTLS_ENDPOINT = "https://storage.mtls.googleapis.com"
POOL_SIZE = 256  # connections kept per host: several bundles each read up to 64 blobs at once, and uploads
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})

_T = TypeVar("_T")


class HttpError(Exception):
    """A response whose status the request did not expect."""

    def __init__(self, response: requests.Response) -> None:
        super().__init__(f"{response.status_code} {response.reason}: {response.text[:200]}")
        self.response = response

    @classmethod
    def of(cls, url: str, response: urllib3.BaseHTTPResponse) -> HttpError:
        """The error for a urllib3 response (read and released here), worded as for a requests one."""
        converted = requests.Response()
        converted.status_code = response.status
        converted.reason = response.reason or ""
        converted.headers = CaseInsensitiveDict(response.headers)
        converted.url = url
        try:
            converted._content = response.data[: 64 * 1024]  # an error's body is short
        except VENDOR_ERRORS:
            converted._content = b""
        response.release_conn()
        return cls(converted)


VENDOR_ERRORS: tuple[type[BaseException], ...] = (
    HttpError,
    auth_exceptions.GoogleAuthError,
    requests.RequestException,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    ConnectionError,
    TimeoutError,
)
"""What a request can raise that says the service, not this program, failed."""

_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    auth_exceptions.TransportError,  # the token endpoint could not be reached
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.TimeoutError,
    http.client.HTTPException,
    ConnectionError,
    TimeoutError,
)


def status_of(exc: BaseException) -> int | None:
    return exc.response.status_code if isinstance(exc, HttpError) else None


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: 408/429/5xx, a dropped or refused connection, a timeout."""
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUS
    return isinstance(exc, _TRANSIENT_TYPES)


def describe(exc: BaseException) -> str:
    """A short account of ``exc`` for a message: the status and the JSON API's own sentence if any."""
    if not isinstance(exc, HttpError):
        text = str(exc) or type(exc).__name__
        return text if len(text) <= 200 else text[:200] + "..."
    status = exc.response.status_code
    reason = f"HTTP {status} {http.client.responses.get(status, '')}".strip()
    try:  # e.g. which permission is missing
        message = str(exc.response.json()["error"]["message"])
    except Exception:
        return reason
    return f"{reason}: {message[:200]}" if message else reason


def default_credentials(bucket: str) -> tuple[Credentials, str | None]:
    """Application Default Credentials and their project; StorageUnavailable saying how to provide them."""
    try:
        credentials, project = google.auth.default(scopes=SCOPES)
    except auth_exceptions.DefaultCredentialsError as exc:
        raise StorageUnavailable(
            f"No Google Cloud credentials were found for bucket {bucket!r}: set "
            "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, run "
            "`gcloud auth application-default login`, or run on a VM or pod with a service account."
        ) from exc
    return credentials, project


def emulator_endpoint(endpoint: str | None) -> str | None:
    """The emulator to use: ``endpoint``, else ``STORAGE_EMULATOR_HOST`` (which Google's libraries read)."""
    endpoint = endpoint or os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    if not endpoint:
        return None
    endpoint = endpoint.rstrip("/")
    return endpoint if "://" in endpoint else f"http://{endpoint}"


class Transport:
    """The session, endpoint, retry policy and error translation of one bucket.

    ``timeout`` bounds each request (and each credential refresh); a request that fails transiently is
    repeated at most ``retries`` times, after ``backoff`` seconds doubling up to ``max_backoff``, with jitter.
    ``emulator``: the base URL of an emulator, or None for Google Cloud Storage itself.
    """

    def __init__(
        self,
        bucket: str,
        credentials: Credentials,
        *,
        emulator: str | None,
        timeout: float,
        retries: int,
        backoff: float,
        max_backoff: float,
    ) -> None:
        self.bucket = bucket
        self.credentials: Credentials = with_scopes_if_required(credentials, SCOPES)  # type: ignore[no-untyped-call]
        self.timeout = timeout
        self.retries = retries
        self._backoff = backoff
        self._max_backoff = max_backoff
        session = AuthorizedSession(self.credentials, refresh_timeout=timeout)  # type: ignore[no-untyped-call]
        pooled = HTTPAdapter(pool_connections=4, pool_maxsize=POOL_SIZE)
        session.mount("https://", pooled)
        session.mount("http://", pooled)
        # Where the environment asks for mutual TLS (GOOGLE_API_USE_CLIENT_CERTIFICATE, workload
        # certificates) this replaces the https adapter with one that presents the client certificate.
        session.configure_mtls_channel()  # type: ignore[no-untyped-call]
        self.session: requests.Session = session  # it adds the credentials' headers, refreshing them
        if emulator is not None:
            self.endpoint = emulator
        else:
            mode = os.environ.get("GOOGLE_API_USE_MTLS_ENDPOINT", "auto")
            mtls = mode == "always" or (mode == "auto" and session.is_mtls)
            self.endpoint = MTLS_ENDPOINT if mtls else PUBLIC_ENDPOINT
        # Signed URLs are followed by others, who have no client certificate: the public endpoint.
        self.signing_endpoint = emulator or PUBLIC_ENDPOINT
        bucket_path = f"/b/{quote(bucket, safe='')}/o"
        self.objects_url = f"{self.endpoint}/storage/v1{bucket_path}"
        self.upload_url = f"{self.endpoint}/upload/storage/v1{bucket_path}"
        self.download_url = f"{self.endpoint}/download/storage/v1{bucket_path}"
        # The short way (send) takes its connection pool from the session's adapter exactly as requests does
        # (same TLS settings and trust store: REQUESTS_CA_BUNDLE, a client certificate), looked up on every
        # call because mutual TLS swaps the adapter when its certificate rotates; where the environment
        # names a proxy for the endpoint, only the session knows how to use it.
        self._short = not (session.trust_env and bool(get_environ_proxies(self.endpoint)))
        self._verify = session.merge_environment_settings(self.endpoint, {}, None, session.verify, None)[
            "verify"
        ]
        # What refreshes the credentials, bounded like the session's own refreshes.
        self._auth_request = functools.partial(session._auth_request, timeout=timeout)

    def object_url(self, object_name: str) -> str:
        return f"{self.objects_url}/{quote(object_name, safe='')}"

    def media_url(self, object_name: str, generation: str | None = None) -> str:
        """The URL of the object's bytes: those of ``generation``, or of the live one."""
        url = f"{self.download_url}/{quote(object_name, safe='')}?alt=media"
        return url if generation is None else f"{url}&generation={generation}"

    # -- requests ----------------------------------------------------------------------------------------
    def request(
        self, method: str, url: str, *, expect: Collection[int], timeout: float | None = None, **kwargs: Any
    ) -> requests.Response:
        """One attempt: the response if its status is in ``expect``, else :class:`HttpError`.

        Keyword arguments go to :meth:`requests.Session.request`; with ``stream=True`` the caller closes the
        response.
        """
        response = self.session.request(method, url, timeout=timeout or self.timeout, **kwargs)
        if response.status_code not in expect:
            response.close()
            raise HttpError(response)
        return response

    def send(
        self,
        method: str,
        url: str,
        *,
        expect: Collection[int],
        headers: Mapping[str, str] | None = None,
        body: bytes | Iterable[bytes] | None = None,
        preload: bool = True,
    ) -> urllib3.BaseHTTPResponse:
        """One attempt, the short way: like :meth:`request` (credentials, timeout, :class:`HttpError`), but
        straight through the session's connection pool with urllib3, for a fraction of the CPU.

        ``url`` carries its query already; an iterable ``body`` needs a Content-Length header. With
        ``preload`` the body is read (``.data``) and the connection back in the pool; without, the caller
        reads it and calls ``release_conn()``. Where a proxy is configured this goes through the session.
        """
        pool = self._short_pool(url)
        if pool is None:
            return self._send_by_session(method, url, expect, headers, body, preload)
        target = urlsplit(url)
        path = f"{target.path}?{target.query}" if target.query else target.path
        timeout = urllib3.Timeout(connect=self.timeout, read=self.timeout)
        for refreshed in (False, True):
            sent = dict(headers or {})
            self.credentials.before_request(self._auth_request, method, url, sent)  # type: ignore[no-untyped-call]
            response = pool.urlopen(
                method,
                path,
                body=body,
                headers=sent,
                retries=False,
                redirect=False,
                timeout=timeout,
                preload_content=preload,
                decode_content=False,
            )
            if response.status == 401 and not refreshed and not isinstance(body, Iterator):
                response.drain_conn()
                response.release_conn()
                self.credentials.refresh(self._auth_request)  # type: ignore[no-untyped-call]
                continue
            break
        if response.status not in expect:
            raise HttpError.of(url, response)
        return response

    def call_short(
        self,
        action: str,
        method: str,
        url: str,
        *,
        expect: Collection[int],
        headers: Mapping[str, str] | None = None,
        body: bytes | Iterable[bytes] | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """:meth:`send` (body read, connection back in the pool), retried as :meth:`call` retries; what still
        fails is StorageUnavailable. A ``body`` that is retried must be iterable more than once."""
        try:
            return self.retrying(lambda: self.send(method, url, expect=expect, headers=headers, body=body))
        except VENDOR_ERRORS as exc:
            raise self.unavailable(action, exc) from exc

    def _short_pool(self, url: str) -> urllib3.connectionpool.HTTPConnectionPool | None:
        """The pool requests itself would send ``url`` through, or None where only the session will do."""
        adapter = self.session.get_adapter(url)
        if not self._short or not isinstance(adapter, HTTPAdapter):
            return None
        request = requests.PreparedRequest()
        request.url = url
        return adapter.get_connection_with_tls_context(request, self._verify, None, self.session.cert)

    def _send_by_session(
        self,
        method: str,
        url: str,
        expect: Collection[int],
        headers: Mapping[str, str] | None,
        body: bytes | Iterable[bytes] | None,
        preload: bool,
    ) -> urllib3.BaseHTTPResponse:
        response = self.request(method, url, expect=range(100, 600), headers=headers, data=body, stream=True)
        raw: urllib3.BaseHTTPResponse = response.raw
        if response.status_code not in expect:
            raise HttpError.of(url, raw)
        if preload:
            raw.read(decode_content=False, cache_content=True)
            raw.release_conn()
        return raw

    def call(
        self,
        action: str,
        method: str,
        url: str,
        *,
        expect: Collection[int],
        missing: str = "the bucket does not exist",
        **kwargs: Any,
    ) -> requests.Response:
        """:meth:`request`, retried while it fails transiently; what still fails is StorageUnavailable.

        ``action`` and ``missing`` word the error, see :meth:`unavailable`.
        """
        try:
            return self.retrying(lambda: self.request(method, url, expect=expect, **kwargs))
        except VENDOR_ERRORS as exc:
            raise self.unavailable(action, exc, missing) from exc

    def retrying(self, func: Callable[[], _T]) -> _T:
        """Call ``func`` until it returns, retrying transient failures as the policy allows."""
        attempt = 0
        while True:
            try:
                return func()
            except Exception as exc:
                if attempt >= self.retries or not is_transient(exc):
                    raise
                log.debug("retrying a storage request after %s", describe(exc))
                self.pause(attempt)
                attempt += 1

    def pause(self, attempt: int) -> None:
        """Wait before retry number ``attempt`` (from 0): exponential backoff with jitter."""
        delay = min(self._max_backoff, self._backoff * 2**attempt)
        time.sleep(delay * (0.5 + random.random() / 2))

    def get_object(self, action: str, object_name: str) -> dict[str, Any] | None:
        """The object's JSON resource (size, generation, metadata...), or None if there is no such object."""
        response = self.call(
            action, "GET", self.object_url(object_name), expect=(200, 404), params={"projection": "noAcl"}
        )
        if response.status_code == 404:
            return None
        resource: dict[str, Any] = response.json()
        return resource

    # -- errors ------------------------------------------------------------------------------------------
    def unavailable(
        self,
        action: str,
        exc: BaseException,
        missing: str = "the bucket does not exist",
        attempts: int | None = None,
    ) -> StorageUnavailable:
        """The error to raise when ``action`` (e.g. ``"read 'ns/k' from"``) failed with ``exc``.

        ``missing`` says what a 404 means for this request; ``attempts`` is how many tries were made (the
        whole retry policy unless the caller says otherwise).
        """
        status = status_of(exc)
        attempts = self.retries + 1 if attempts is None else attempts
        if is_transient(exc) and attempts == 1:
            reason = f"it failed ({describe(exc)})"
        elif is_transient(exc):
            reason = f"it still failed after {attempts} attempts ({describe(exc)})"
        elif status in (401, 403):
            reason = f"access was refused ({describe(exc)}); check that the credentials may use its objects"
        elif status in (404, 410):
            reason = missing
        else:
            reason = describe(exc)
        return StorageUnavailable(f"Cannot {action} Google Cloud Storage bucket {self.bucket!r}: {reason}.")

    def close(self) -> None:
        self.session.close()
