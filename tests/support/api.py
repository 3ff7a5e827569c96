"""Speaking the cache's v1 entry API in tests and bench: digests, upload headers, one PUT, a bulk upload.

Every test that stores entries over HTTP goes through :func:`put` (or :func:`put_ok`, which also checks the
answer, or :func:`put_at`, which opens its own connection); the header names come from :mod:`cache_protocol`,
their one home. ``http`` is any ``httpx.Client`` (a FastAPI ``TestClient`` is one) whose base URL is the
server, or whose paths start at its root.

A bulk upload's body is built one of two ways: :func:`tar_of` of :func:`member` pairs (Python's tarfile, for a
whole body), or :func:`stream_member` pieces followed by ``cache_protocol.tar.END`` (the client's own writer,
for a stream sent or read piece by piece).
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterable

import httpx

from cache_protocol import BUNDLE_SHA256_PAX, COMPILE_TIME_HEADER, SHA256_HEADER
from cache_protocol.tar import member_header, padding

__all__ = [
    "Member",
    "bearer",
    "entries_url",
    "entry_url",
    "member",
    "post_bulk",
    "put",
    "put_at",
    "put_ok",
    "sha",
    "stream_member",
    "tar_of",
    "upload_headers",
]

Member = tuple[tarfile.TarInfo, bytes]
"""One member of a bulk upload's tar stream: its header and its bytes."""


def sha(data: bytes) -> str:
    """The SHA-256 of ``data`` as the API writes it (64 lower-case hex digits)."""
    return hashlib.sha256(data).hexdigest()


def entries_url(namespace: str) -> str:
    """The path of a namespace's entries (``POST`` here is a bulk upload)."""
    return f"/v1/namespaces/{namespace}/entries"


def entry_url(namespace: str, key: str) -> str:
    """The path of one entry."""
    return f"{entries_url(namespace)}/{key}"


def bearer(token: str) -> dict[str, str]:
    """The header that presents ``token``."""
    return {"Authorization": f"Bearer {token}"}


def upload_headers(
    data: bytes, *, digest: str | None = None, compile_ms: int | None = None, **extra: str
) -> dict[str, str]:
    """The headers of an upload of ``data``: its digest (or ``digest``, to send a wrong one), the compile
    time when given, and ``extra`` (say ``Authorization`` or ``X-Uploader``)."""
    headers = {SHA256_HEADER: sha(data) if digest is None else digest}
    if compile_ms is not None:
        headers[COMPILE_TIME_HEADER] = str(compile_ms)
    return {**headers, **extra}


def put(
    http: httpx.Client,
    namespace: str,
    key: str,
    data: bytes,
    *,
    body: Iterable[bytes] | None = None,
    digest: str | None = None,
    compile_ms: int | None = None,
    **extra: str,
) -> httpx.Response:
    """``PUT`` one entry, whatever the answer. ``body``, when given, is sent in place of ``data`` as a
    chunked stream without a Content-Length (say ``data`` in pieces, or a generator that pauses); the
    headers are still ``data``'s (see :func:`upload_headers` for the other keyword arguments)."""
    headers = upload_headers(data, digest=digest, compile_ms=compile_ms, **extra)
    content = data if body is None else iter(body)
    return http.put(entry_url(namespace, key), content=content, headers=headers)


def put_at(
    url: str,
    namespace: str,
    key: str,
    data: bytes,
    *,
    body: Iterable[bytes] | None = None,
    digest: str | None = None,
    compile_ms: int | None = None,
    **extra: str,
) -> httpx.Response:
    """:func:`put` over a connection of its own to the server at ``url`` (from another thread, say)."""
    with httpx.Client(base_url=url, timeout=60) as http:
        return put(http, namespace, key, data, body=body, digest=digest, compile_ms=compile_ms, **extra)


def put_ok(
    http: httpx.Client,
    namespace: str,
    key: str,
    data: bytes,
    *,
    compile_ms: int | None = None,
    created: bool = False,
    **extra: str,
) -> int:
    """``PUT`` one entry and check it is stored (201, or 200 for the same bytes again; only 201 when
    ``created``); the status."""
    response = put(http, namespace, key, data, body=None, digest=None, compile_ms=compile_ms, **extra)
    expected = (201,) if created else (200, 201)
    assert response.status_code in expected, response.text
    return response.status_code


def member(name: str, data: bytes, *, digest: str | None = None, **pax: str) -> Member:
    """A bulk upload member carrying its digest (or ``digest``) and any other PAX headers."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.pax_headers = {BUNDLE_SHA256_PAX: sha(data) if digest is None else digest, **pax}
    return info, data


def stream_member(name: str, data: bytes, *, digest: str | None = None) -> bytes:
    """One bulk upload member as the bytes of a tar stream (header, data, padding), carrying its digest (or
    ``digest``); end the stream with ``cache_protocol.tar.END``."""
    records = {BUNDLE_SHA256_PAX: sha(data) if digest is None else digest}
    return member_header(name, len(data), records=records) + data + padding(len(data))


def tar_of(members: Iterable[Member]) -> bytes:
    """A bulk upload's body: the members as one PAX tar stream."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def post_bulk(http: httpx.Client, namespace: str, members: Iterable[Member]) -> httpx.Response:
    """``POST`` the members as one bulk upload into ``namespace``, whatever the answer."""
    body = tar_of(members)
    return http.post(entries_url(namespace), content=body, headers={"Content-Type": "application/x-tar"})
