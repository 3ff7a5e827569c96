"""Uploads of the Google Cloud Storage backend: the bytes held between the chunks iterator and GCS, request
bodies made of pieces, and the resumable-session protocol that sends them.
"""

from __future__ import annotations

import base64
import logging
import re
from collections import deque
from collections.abc import Iterable, Iterator
from typing import cast

import google_crc32c
import requests

from cache_server.errors import StorageUnavailable
from cache_server.storage._gcs_errors import VENDOR_ERRORS, Exists, HttpError, Retry, is_transient

__all__ = ["Body", "Pending", "Upload", "skip"]

# The backend's logger, named as before its helpers moved out of cache_server.storage.gcs.
log = logging.getLogger("cache_server.storage.gcs")

PERSISTED = re.compile(r"bytes=0-(\d+)")


class Body:
    """A request body made of pieces sent one after another, never joined (and sendable again)."""

    def __init__(self, pieces: list[memoryview]) -> None:
        self._pieces = pieces
        self._size = sum(len(p) for p in pieces)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[bytes]:
        # requests and urllib3 only send each piece; a memoryview does as well as bytes.
        return iter(cast("list[bytes]", self._pieces))


class Pending:
    """Bytes received from the chunks iterator and not yet handed to GCS, and the CRC32C of all of them."""

    def __init__(self) -> None:
        self._pieces: deque[memoryview] = deque()
        self.size = 0
        self._crc32c = 0

    def add(self, piece: bytes) -> None:
        # A caller may reuse a mutable buffer after handing it over; keep an immutable copy then.
        data = piece if isinstance(piece, bytes) else bytes(piece)
        self._crc32c = google_crc32c.extend(self._crc32c, data)
        self._pieces.append(memoryview(data))
        self.size += len(data)

    def take(self, n: int) -> list[memoryview]:
        """Remove and return the first ``n`` bytes (slices of the pieces, not copies)."""
        out: list[memoryview] = []
        need = n
        while need:
            piece = self._pieces[0]
            if len(piece) <= need:
                out.append(self._pieces.popleft())
                need -= len(piece)
            else:
                out.append(piece[:need])
                self._pieces[0] = piece[need:]
                need = 0
        self.size -= n
        return out

    def joined(self) -> bytes:
        return b"".join(self._pieces)

    def crc32c(self) -> bytes:
        """The CRC32C of every byte added so far, big-endian, as GCS reports it."""
        return int(self._crc32c).to_bytes(4, "big")


def skip(pieces: list[memoryview], n: int) -> list[memoryview]:
    """The pieces without their first ``n`` bytes."""
    out: list[memoryview] = []
    for piece in pieces:
        if n >= len(piece):
            n -= len(piece)
            continue
        out.append(piece[n:])
        n = 0
    return out


class Upload:
    """One resumable upload session (https://cloud.google.com/storage/docs/performing-resumable-uploads).

    Requests go through the store's ``session`` with its ``timeout``; ``retry`` is its retry policy.
    """

    def __init__(self, session: requests.Session, url: str, *, retry: Retry, timeout: float) -> None:
        self._session = session
        self._retry = retry
        self._timeout = timeout
        self.url = url
        self.offset = 0  # bytes GCS has persisted

    def send(self, pieces: list[memoryview], *, crc32c: bytes | None = None) -> None:
        """Send ``pieces`` (which start at :attr:`offset`) and return once GCS has persisted them.

        With ``crc32c`` (the checksum of the whole object) this is the final chunk, which creates the object.
        Raises :class:`Exists` on 412. A transient failure is retried after asking GCS what it kept.
        """
        final = crc32c is not None
        start = self.offset
        end = start + sum(len(p) for p in pieces)
        retry = self._retry
        attempt = 0
        ask_status = False
        while True:
            try:
                if ask_status:
                    ask_status = False
                    response = self._put(b"", "bytes */*")
                    if response.status_code == 308:
                        self.offset = self._persisted(response, start)
                        if self.offset >= end and not final:
                            return
                        continue
                else:
                    body = skip(pieces, self.offset - start)
                    response = self._put(Body(body) if body else b"", self._range(end, final), crc32c)
                    if response.status_code == 308:
                        persisted = self._persisted(response, start)
                        if persisted <= self.offset and self.offset < end:
                            raise HttpError(response)  # no progress: retried below like a server error
                        self.offset = persisted
                        attempt = 0
                        if self.offset >= end and not final:
                            return
                        continue
                if response.status_code in (200, 201):
                    if not final:
                        raise StorageUnavailable(
                            "Google Cloud Storage finished a resumable upload before its last chunk was sent."
                        )
                    self.offset = end
                    return
                if response.status_code == 412:
                    raise Exists()
                raise HttpError(response)
            except VENDOR_ERRORS as exc:
                no_progress = isinstance(exc, HttpError) and exc.response.status_code == 308
                if attempt >= retry.retries or not (no_progress or is_transient(exc)):
                    raise
                retry.sleep(attempt)
                attempt += 1
                ask_status = True

    @staticmethod
    def _persisted(response: requests.Response, start: int) -> int:
        match = PERSISTED.fullmatch(response.headers.get("Range", ""))
        persisted = int(match.group(1)) + 1 if match else 0
        if persisted < start:
            raise StorageUnavailable("Google Cloud Storage lost part of an upload it had acknowledged.")
        return persisted

    def _range(self, end: int, final: bool) -> str:
        total = str(end) if final else "*"
        if self.offset == end:
            return f"bytes */{total}"
        return f"bytes {self.offset}-{end - 1}/{total}"

    def _put(
        self, body: Iterable[bytes] | bytes, content_range: str, crc32c: bytes | None = None
    ) -> requests.Response:
        headers = {"Content-Range": content_range}
        if crc32c is not None:
            # GCS checks the whole object against this before it makes the object exist.
            headers["X-Goog-Hash"] = "crc32c=" + base64.b64encode(crc32c).decode()
        response = self._session.put(self.url, data=body, headers=headers, timeout=self._timeout)
        response.close()
        return response

    def cancel(self) -> None:
        """Cancel the session; an unfinished session never becomes an object, so failures are only logged."""
        try:
            self._session.delete(self.url, timeout=min(self._timeout, 10.0)).close()
        except VENDOR_ERRORS as exc:
            log.warning("could not cancel a resumable upload session (it expires by itself): %s", exc)
