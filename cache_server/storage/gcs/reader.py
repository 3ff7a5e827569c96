"""Reads of the GCS backend: an open object is one streamed GET, pinned to the generation that was looked up
and resumed with a Range request if the connection drops, so a blob is never held whole in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType

import requests

from cache_server.errors import StorageUnavailable
from cache_server.storage.base import READ_CHUNK, BlobInfo
from cache_server.storage.gcs.transport import VENDOR_ERRORS, Transport, is_transient

__all__ = ["GcsReader"]


class GcsReader:
    """An open GCS object: its info and one streamed GET of ``url`` (the object's media at one generation).
    No ``identity``: the service hashes every GCS read."""

    identity = None

    def __init__(self, transport: Transport, info: BlobInfo, url: str, response: requests.Response) -> None:
        self.info = info
        self._transport = transport
        self._url = url
        self._response: requests.Response | None = response

    @classmethod
    def open(cls, transport: Transport, info: BlobInfo, url: str) -> GcsReader | None:
        """Start reading; None if the object was deleted since ``info`` was looked up."""
        response = cls._get(transport, info, url, 0)
        return None if response is None else cls(transport, info, url, response)

    @staticmethod
    def _get(transport: Transport, info: BlobInfo, url: str, offset: int) -> requests.Response | None:
        """A streamed GET of the bytes from ``offset``; None if the object is gone."""
        headers = {"Accept-Encoding": "identity"}  # the stored bytes, which the size and Range refer to
        if offset:
            headers["Range"] = f"bytes={offset}-"
        response = transport.call(
            f"read {info.name!r} from",
            "GET",
            url,
            expect=(206 if offset else 200, 404),
            headers=headers,
            stream=True,
        )
        if response.status_code == 404:
            response.close()
            return None
        return response

    def chunks(self) -> Iterator[bytes]:
        size = self.info.size
        offset = 0
        attempt = 0
        try:
            while offset < size:
                if self._response is None:
                    self._response = self._get(self._transport, self.info, self._url, offset)
                    if self._response is None:
                        raise StorageUnavailable(
                            f"The object for {self.info.name!r} in Google Cloud Storage bucket "
                            f"{self._transport.bucket!r} was deleted while it was being read."
                        )
                try:
                    for piece in self._response.raw.stream(READ_CHUNK, decode_content=False):
                        if piece:
                            offset += len(piece)
                            attempt = 0
                            yield piece
                    if offset < size:
                        raise ConnectionError(f"the download ended after {offset} of {size} bytes")
                except VENDOR_ERRORS as exc:
                    if attempt >= self._transport.retries or not is_transient(exc):
                        raise self._transport.unavailable(f"read {self.info.name!r} from", exc) from exc
                    self._transport.pause(attempt)
                    attempt += 1
                finally:
                    self._close_response()
            if offset != size:
                raise StorageUnavailable(
                    f"Google Cloud Storage bucket {self._transport.bucket!r} returned {offset} bytes for "
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
