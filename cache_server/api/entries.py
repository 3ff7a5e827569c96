"""Routes for entries: upload, download, existence, delete, missing, manifest and bundle."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Annotated

import anyio
import anyio.from_thread
import anyio.to_thread
from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import StreamingResponse

from cache_protocol import COMPILE_TIME_HEADER, SHA256_HEADER
from cache_server.api.deps import ServiceDep
from cache_server.api.schemas import KeysRequest, ManifestEntry, ManifestOut, MissingOut, PutOut
from cache_server.api.signed_urls import redirect_to
from cache_server.domain import EntryInfo
from cache_server.errors import BadRequest
from cache_server.names import check_key, check_namespace, check_sha256
from cache_server.service import NotModified, OpenedEntry
from cache_server.streams import Coalescer

__all__ = ["router"]

router = APIRouter(prefix="/v1/namespaces/{namespace}", tags=["entries"])


async def _coalesced(request: Request) -> AsyncIterator[bytes]:
    """The request body in pieces of about a MiB: each crosses to the worker thread in one hop."""
    joiner = Coalescer()
    async for chunk in request.stream():
        if (joined := joiner.push(chunk)) is not None:
            yield joined
    if (joined := joiner.rest()) is not None:
        yield joined


def _blocking_body(stream: AsyncIterator[bytes]) -> Iterator[bytes]:
    """Pull an async body from a worker thread, one piece at a time (never the whole body)."""

    async def next_piece() -> bytes | None:
        try:
            return await stream.__anext__()
        except StopAsyncIteration:
            return None

    while (piece := anyio.from_thread.run(next_piece)) is not None:
        yield piece


def _entry_headers(entry: EntryInfo) -> dict[str, str]:
    return {
        "ETag": f'"{entry.sha256}"',
        SHA256_HEADER: entry.sha256,
        "Content-Length": str(entry.size),
        "Cache-Control": "private, max-age=31536000, immutable",
    }


def _optional_int(name: str, value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"The {name} header must be a whole number, not {value!r}.") from None
    if number < 0:
        raise BadRequest(f"The {name} header must not be negative.")
    return number


@router.put(
    "/entries/{key:path}",
    response_model=PutOut,
    responses={200: {"description": "Already stored with the same digest"}, 201: {"description": "Stored"}},
)
async def put_entry(
    namespace: str,
    key: str,
    request: Request,
    service: ServiceDep,
    response: Response,
    x_content_sha256: Annotated[str | None, Header()] = None,
    x_compile_time_ms: Annotated[str | None, Header()] = None,
    x_uploader: Annotated[str | None, Header()] = None,
) -> PutOut:
    """Upload an entry's bytes, streamed and checked against ``X-Content-SHA256``.

    201 stored; 200 already stored with this digest; 409 stored with another digest (the first stays);
    400 the body does not match its digest; 413 larger than ``XLA_CACHE_MAX_ENTRY_BYTES``.
    """
    check_namespace(namespace)
    check_key(key)
    sha256 = check_sha256(x_content_sha256)
    declared = _optional_int("Content-Length", request.headers.get("content-length"))
    compile_ms = _optional_int(COMPILE_TIME_HEADER, x_compile_time_ms)
    service.check_upload_size(declared)
    body = _blocking_body(_coalesced(request).__aiter__())
    result = await anyio.to_thread.run_sync(
        lambda: service.put_entry(
            namespace,
            key,
            body,
            sha256=sha256,
            declared_size=declared,
            compile_time_ms=compile_ms,
            uploader=x_uploader,
        )
    )
    response.status_code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
    return PutOut(
        namespace=namespace, key=key, size=result.size, sha256=result.sha256, created=result.created
    )


@router.get(
    "/entries/{key:path}",
    response_class=StreamingResponse,
    responses={307: {"description": "With ?redirect=1 on a server that signs URLs: download from Location"}},
)
def get_entry(
    namespace: str,
    key: str,
    service: ServiceDep,
    if_none_match: Annotated[str | None, Header()] = None,
    redirect: Annotated[
        bool, Query(description="Prefer a 307 to a short-lived signed URL when the server hands them out.")
    ] = False,
) -> Response:
    """Download an entry's bytes with ``ETag`` and ``X-Content-SHA256``; 404 on a miss (counted).

    With ``?redirect=1`` a server that hands out signed URLs answers 307 to one instead (same headers,
    plus ``X-Content-Length``); any other server streams the bytes as usual.
    """
    read = service.read_entry(namespace, key, if_none_match=if_none_match or None, redirect=redirect)
    if isinstance(read, NotModified):
        return Response(status_code=304, headers={"ETag": f'"{read.entry.sha256}"'})
    if isinstance(read, OpenedEntry):
        return StreamingResponse(
            read.body, media_type="application/octet-stream", headers=_entry_headers(read.entry)
        )
    return redirect_to(read)


@router.head("/entries/{key:path}")
def head_entry(namespace: str, key: str, service: ServiceDep) -> Response:
    """Whether an entry exists, with its size and digest headers (not counted as a hit)."""
    entry = service.head_entry(namespace, key)
    return Response(headers=_entry_headers(entry), media_type="application/octet-stream")


@router.delete("/entries/{key:path}", status_code=status.HTTP_204_NO_CONTENT)
def delete_entry(namespace: str, key: str, service: ServiceDep) -> Response:
    """Remove an entry (index row first, then the blob)."""
    service.delete_entry(namespace, key)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/missing", response_model=MissingOut)
def missing(namespace: str, body: KeysRequest, service: ServiceDep) -> MissingOut:
    """Which of these keys the server lacks (ask before uploading)."""
    return MissingOut(missing=service.missing(namespace, body.keys))


@router.get("/manifest", response_model=ManifestOut)
def manifest(
    namespace: str,
    service: ServiceDep,
    max_bytes: Annotated[int | None, Query(ge=0)] = None,
    max_entries: Annotated[int | None, Query(ge=0)] = None,
) -> ManifestOut:
    """The entries worth warming, most useful first (hits, then recency), within the bounds."""
    entries = service.manifest(namespace, max_bytes=max_bytes, max_entries=max_entries)
    return ManifestOut(
        namespace=namespace,
        entries=[ManifestEntry(key=e.key, size=e.size, sha256=e.sha256) for e in entries],
        total_bytes=sum(e.size for e in entries),
    )


@router.post("/bundle", response_class=StreamingResponse)
def bundle(namespace: str, body: KeysRequest, service: ServiceDep) -> StreamingResponse:
    """One ``application/x-tar`` stream of the stored entries among these keys (member name = key).

    Keys the server lacks are left out; each member carries a ``XLA_CACHE.sha256`` PAX header.
    """
    return StreamingResponse(service.bundle(namespace, body.keys), media_type="application/x-tar")
