"""Errors of the Google Cloud Storage backend: what counts as a vendor error, which are transient, how to
describe one, and the retry policy (exponential backoff with jitter) applied to transient ones.
"""

from __future__ import annotations

import http.client
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import requests
import urllib3
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.cloud.storage import exceptions as storage_exceptions

__all__ = ["VENDOR_ERRORS", "Exists", "HttpError", "Retry", "describe", "is_transient", "status_of"]

# The backend's logger, named as before its helpers moved out of cache_server.storage.gcs.
log = logging.getLogger("cache_server.storage.gcs")

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})

_T = TypeVar("_T")


class HttpError(Exception):
    """An unexpected status from one of the requests the backend sends itself."""

    def __init__(self, response: requests.Response) -> None:
        super().__init__(f"{response.status_code} {response.reason}: {response.text[:200]}")
        self.response = response


class Exists(Exception):
    """GCS refused the upload because the object exists (412)."""


VENDOR_ERRORS: tuple[type[BaseException], ...] = (
    api_exceptions.GoogleAPICallError,
    auth_exceptions.GoogleAuthError,
    storage_exceptions.InvalidResponse,
    storage_exceptions.DataCorruption,
    requests.RequestException,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    ConnectionError,
    TimeoutError,
    HttpError,
)
TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
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
    if isinstance(exc, api_exceptions.GoogleAPICallError) and isinstance(exc.code, int):
        return exc.code
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: 408/429/5xx, a dropped or refused connection, a timeout."""
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUS
    if isinstance(exc, auth_exceptions.TransportError):  # the token endpoint could not be reached
        return True
    return isinstance(exc, TRANSIENT_TYPES)


def describe(exc: BaseException) -> str:
    status = status_of(exc)
    if status is None:
        text = str(exc) or type(exc).__name__
        return text if len(text) <= 200 else text[:200] + "..."
    reason = f"HTTP {status} {http.client.responses.get(status, '')}".strip()
    try:  # the JSON API's own sentence, e.g. which permission is missing
        message = str(getattr(exc, "response", None).json()["error"]["message"])  # type: ignore[union-attr]
    except Exception:
        return reason
    return f"{reason}: {message[:200]}" if message else reason


class Retry:
    """Exponential backoff with jitter on transient errors, at most ``retries`` retries per call.

    Instances also serve as the ``retry=`` argument of google-cloud-storage calls, which call ``retry(func)``
    and then the function it returns.
    """

    def __init__(self, retries: int, initial: float, maximum: float) -> None:
        self.retries = retries
        self.initial = initial
        self.maximum = maximum

    def sleep(self, attempt: int) -> None:
        delay = min(self.maximum, self.initial * 2**attempt)
        time.sleep(delay * (0.5 + random.random() / 2))

    def run(self, func: Callable[[], _T]) -> _T:
        attempt = 0
        while True:
            try:
                return func()
            except Exception as exc:
                if attempt >= self.retries or not is_transient(exc):
                    raise
                log.debug("retrying a storage request after %s", describe(exc))
                self.sleep(attempt)
                attempt += 1

    def __call__(self, func: Callable[..., _T], on_error: object = None) -> Callable[..., _T]:
        def retrying(*args: Any, **kwargs: Any) -> _T:
            return self.run(lambda: func(*args, **kwargs))

        return retrying
