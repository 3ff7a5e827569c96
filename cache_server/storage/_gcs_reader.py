"""Downloads of the Google Cloud Storage backend: the reader of an open object, one streamed GET read a
chunk at a time and resumed with a Range request if the connection drops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import TracebackType

import requests

from cache_server.errors import StorageUnavailable
from cache_server.storage._gcs_errors import VENDOR_ERRORS, Retry, is_transient
from cache_server.storage.base import BlobInfo

__all__ = ["READ_CHUNK", "GcsReader"]

MIB = 1024 * 1024
READ_CHUNK = MIB


class GcsReader:
    """An open GCS object: its info and one streamed GET, resumed with a Range request if it drops.

    The store lends what a resumed read needs: ``get_media(name, url, offset)`` starts a streamed GET from
    ``offset`` (None if the object is gone), ``unavailable(action, exc)`` makes the error to raise, and
    ``retry`` is its retry policy; ``bucket_name`` is for messages.
    """

    def __init__(
        self,
        info: BlobInfo,
        url: str,
        response: requests.Response,
        *,
        bucket_name: str,
        retry: Retry,
        get_media: Callable[[str, str, int], requests.Response | None],
        unavailable: Callable[[str, BaseException], StorageUnavailable],
    ) -> None:
        self.info = info
        self._url = url
        self._response: requests.Response | None = response
        self._bucket_name = bucket_name
        self._retry = retry
        self._get_media = get_media
        self._unavailable = unavailable

    def chunks(self) -> Iterator[bytes]:
        size = self.info.size
        offset = 0
        attempt = 0
        try:
            while offset < size:
                if self._response is None:
                    response = self._get_media(self.info.name, self._url, offset)
                    if response is None:
                        raise StorageUnavailable(
                            f"The object for {self.info.name!r} in Google Cloud Storage bucket "
                            f"{self._bucket_name!r} was deleted while it was being read."
                        )
                    self._response = response
                try:
                    for piece in self._response.raw.stream(READ_CHUNK, decode_content=False):
                        if piece:
                            offset += len(piece)
                            attempt = 0
                            yield piece
                    if offset < size:
                        raise ConnectionError(f"the download ended after {offset} of {size} bytes")
                except VENDOR_ERRORS as exc:
                    if attempt >= self._retry.retries or not is_transient(exc):
                        raise self._unavailable(f"read {self.info.name!r} from", exc) from exc
                    self._retry.sleep(attempt)
                    attempt += 1
                finally:
                    self._close_response()
            if offset != size:
                raise StorageUnavailable(
                    f"Google Cloud Storage bucket {self._bucket_name!r} returned {offset} bytes for "
                    f"{self.info.name!r}, which has {size}."
                )
        finally:
            self._close_response()

    def _close_response(self) -> None:
        if self._response is not None:
            self._response.close()
            self._response = None

    def close(self) -> None:
        self._close_response()

    def __enter__(self) -> GcsReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
