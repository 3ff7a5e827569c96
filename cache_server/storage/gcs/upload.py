"""Uploads of the GCS backend: how a chunks iterator becomes an object, all or nothing and create-only (the
package docstring says how). Both kinds of request carry the CRC32C of the whole body, which GCS checks before
the object exists. The resumable protocol: https://cloud.google.com/storage/docs/performing-resumable-uploads.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

import google_crc32c
import requests

from cache_server.errors import StorageUnavailable
from cache_server.storage.base import MIB
from cache_server.storage.gcs.transport import VENDOR_ERRORS, HttpError, Transport, describe, is_transient

__all__ = ["CHUNK_MULTIPLE", "DEFAULT_CHUNK_SIZE", "MULTIPART_LIMIT", "upload"]

log = logging.getLogger(__name__)

MULTIPART_LIMIT = 8 * MIB
"""Bodies up to this size are uploaded in one request; larger ones through a resumable session."""
DEFAULT_CHUNK_SIZE = 16 * MIB
"""The piece of a resumable upload held in memory and sent per request."""
CHUNK_MULTIPLE = 256 * 1024
"""GCS wants every chunk of a resumable upload but the last to be a multiple of this."""
CONTENT_TYPE = "application/octet-stream"
_PERSISTED = re.compile(r"bytes=0-(\d+)")


class Exists(Exception):
    """GCS refused the upload because the object exists (412)."""


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

    def crc32c(self) -> str:
        """The CRC32C of every byte added so far, as GCS writes it: base64 of the big-endian value."""
        return base64.b64encode(int(self._crc32c).to_bytes(4, "big")).decode()


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


def upload(
    transport: Transport,
    name: str,
    object_name: str,
    chunks: Iterable[bytes],
    metadata: Mapping[str, str],
    *,
    chunk_size: int,
    replace: Callable[[dict[str, Any]], bool] | None = None,
) -> bool:
    """Create the object ``object_name`` (blob ``name``, for messages) from ``chunks`` unless it exists.

    True: created; False: it existed, and the chunks were still consumed. If the iterator raises, nothing is
    created and the error propagates. ``replace``: asked about the object there (its JSON resource); if it
    answers True, the upload replaces exactly that generation (``ifGenerationMatch``), so of several
    replacers one wins.
    """
    resource = {"name": object_name, "contentType": CONTENT_TYPE, "metadata": dict(metadata)}
    pieces = iter(chunks)
    pending = Pending()
    for piece in pieces:
        pending.add(piece)
        if pending.size > MULTIPART_LIMIT:
            return _upload_resumable(transport, name, resource, pending, pieces, chunk_size, replace)
    return _upload_multipart(transport, name, resource, pending, replace)


def _upload_multipart(
    transport: Transport,
    name: str,
    resource: dict[str, Any],
    pending: Pending,
    replace: Callable[[dict[str, Any]], bool] | None = None,
) -> bool:
    resource = {**resource, "crc32c": pending.crc32c()}
    boundary = uuid.uuid4().hex
    head = (
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{json.dumps(resource)}\r\n"
        f"--{boundary}\r\nContent-Type: {CONTENT_TYPE}\r\n\r\n"
    )
    body = Body(
        [
            memoryview(head.encode()),
            *pending.take(pending.size),
            memoryview(f"\r\n--{boundary}--\r\n".encode()),
        ]
    )
    generation = "0"
    while True:
        response = transport.call_short(  # the short way: most uploads are of small blobs, and CPU counts
            f"store {name!r} in",
            "POST",
            f"{transport.upload_url}?uploadType=multipart&ifGenerationMatch={generation}",
            expect=(200, 201, 412),
            body=body,
            headers={
                "Content-Type": f"multipart/related; boundary={boundary}",
                "Content-Length": str(len(body)),
            },
        )
        if response.status != 412:
            return True
        if replace is None or generation != "0":  # create-only, or another replacer won
            return False
        existing = transport.get_object(f"look up {name!r} in", resource["name"])
        if existing is not None and not replace(existing):
            return False
        generation = "0" if existing is None else str(existing["generation"])  # the body is sent again


def _upload_resumable(
    transport: Transport,
    name: str,
    resource: dict[str, Any],
    pending: Pending,
    pieces: Iterator[bytes],
    chunk_size: int,
    replace: Callable[[dict[str, Any]], bool] | None = None,
) -> bool:
    action = f"store {name!r} in"
    # GCS would refuse the body at its end anyway; do not upload it for nothing.
    session = None
    existing = transport.get_object(action, resource["name"])
    if existing is None:
        session = ResumableUpload.start(transport, action, resource)
    elif replace is not None and replace(existing):
        session = ResumableUpload.start(transport, action, resource, generation=str(existing["generation"]))
    if session is None:
        _drain(pieces)
        return False
    try:
        for piece in pieces:
            pending.add(piece)
            while pending.size >= chunk_size:
                session.send(pending.take(chunk_size))
        session.send(pending.take(pending.size), crc32c=pending.crc32c())
    except Exists:
        session.cancel()
        _drain(pieces)
        return False
    except BaseException:  # the iterator's own error, or the session's StorageUnavailable
        session.cancel()
        raise
    return True


def _drain(pieces: Iterator[bytes]) -> None:
    """Consume what is left, so that a checking iterator still sees every byte (and may raise)."""
    for _ in pieces:
        pass


class ResumableUpload:
    """One resumable upload session; :attr:`offset` is how many bytes GCS has persisted.

    ``action`` words its errors (see :meth:`Transport.unavailable`).
    """

    def __init__(self, transport: Transport, action: str, url: str) -> None:
        self._transport = transport
        self._action = action
        self.url = url
        self.offset = 0

    @classmethod
    def start(
        cls, transport: Transport, action: str, resource: dict[str, Any], *, generation: str = "0"
    ) -> ResumableUpload | None:
        """Open a session for the object ``resource`` describes; None if the object exists (``generation``:
        unless it is that generation, which the upload then replaces)."""
        response = transport.call(
            action,
            "POST",
            transport.upload_url,
            expect=(200, 201, 412),
            params={"uploadType": "resumable", "ifGenerationMatch": generation},
            json=resource,
            headers={"X-Upload-Content-Type": CONTENT_TYPE},
        )
        response.close()
        if response.status_code == 412:
            return None
        return cls(transport, action, response.headers["Location"])

    def send(self, pieces: list[memoryview], *, crc32c: str | None = None) -> None:
        """Send ``pieces`` (which start at :attr:`offset`) and return once GCS has persisted them.

        With ``crc32c`` (that of the whole object) this is the final chunk, which creates the object.
        Raises :class:`Exists` on 412. A transient failure is retried after asking GCS what it kept; what
        still fails is StorageUnavailable.
        """
        final = crc32c is not None
        start = self.offset
        end = start + sum(len(p) for p in pieces)
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
                if response.status_code == 412:
                    raise Exists()
                if not final:
                    raise StorageUnavailable(
                        "Google Cloud Storage finished a resumable upload before its last chunk was sent."
                    )
                self.offset = end
                return
            except VENDOR_ERRORS as exc:
                no_progress = isinstance(exc, HttpError) and exc.response.status_code == 308
                if attempt >= self._transport.retries or not (no_progress or is_transient(exc)):
                    gone = f"its resumable upload session has expired ({describe(exc)})"
                    raise self._transport.unavailable(self._action, exc, gone) from exc
                self._transport.pause(attempt)
                attempt += 1
                ask_status = True

    @staticmethod
    def _persisted(response: requests.Response, start: int) -> int:
        match = _PERSISTED.fullmatch(response.headers.get("Range", ""))
        persisted = int(match.group(1)) + 1 if match else 0
        if persisted < start:
            raise StorageUnavailable("Google Cloud Storage lost part of an upload it had acknowledged.")
        return persisted

    def _range(self, end: int, final: bool) -> str:
        total = str(end) if final else "*"
        if self.offset == end:
            return f"bytes */{total}"
        return f"bytes {self.offset}-{end - 1}/{total}"

    def _put(self, body: Body | bytes, content_range: str, crc32c: str | None = None) -> requests.Response:
        headers = {"Content-Range": content_range}
        if crc32c is not None:
            headers["X-Goog-Hash"] = f"crc32c={crc32c}"
        response = self._transport.request(
            "PUT", self.url, expect=(200, 201, 308, 412), data=body, headers=headers
        )
        response.close()
        return response

    def cancel(self) -> None:
        """Cancel the session; an unfinished session never becomes an object, so failures are only logged."""
        try:
            self._transport.request(
                "DELETE", self.url, expect=range(200, 600), timeout=min(self._transport.timeout, 10.0)
            ).close()
        except VENDOR_ERRORS as exc:
            log.warning("could not cancel a resumable upload session (it expires by itself): %s", exc)
