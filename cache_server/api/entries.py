"""Routes that read entries: download, existence, delete, missing, manifest and bundle."""

from __future__ import annotations

import copy
from typing import Annotated, Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import StreamingResponse

from cache_protocol import SHA256_HEADER
from cache_protocol.prefill import is_prefilled
from cache_protocol.signing import SIGNATURE_HEADER
from cache_server.api.access import Scope, declare
from cache_server.api.deps import ServiceDep, get_service, get_settings
from cache_server.api.schemas import INDEX_INT_MAX, KeysRequest, ManifestOut, MissingOut, json_body
from cache_server.api.signed_urls import redirect_to
from cache_server.auth.tokens import Role
from cache_server.domain import EntryInfo
from cache_server.errors import BadRequest
from cache_server.service import NotModified, OpenedEntry, ReadWish
from cache_server.streams import accepts_zstd, zstd_compressed

__all__ = ["router"]

router = APIRouter(prefix="/v1/namespaces/{namespace}", tags=["entries"])


def _entry_headers(entry: EntryInfo) -> dict[str, str]:
    headers = {
        "ETag": f'"{entry.sha256}"',
        SHA256_HEADER: entry.sha256,
        "Content-Length": str(entry.size),
        "Cache-Control": "private, max-age=31536000, immutable",
    }
    if entry.signature:
        headers[SIGNATURE_HEADER] = entry.signature
    return headers


# GET and HEAD are the routes a fleet calls most, one request per entry: they read their parameters off
# the request themselves (FastAPI's per-request parameter solving cost more than the rest of a GET answered
# from memory) and describe them to the OpenAPI document here.
_ENTRY_PATH_PARAMETERS: list[dict[str, Any]] = [
    {"name": "namespace", "in": "path", "required": True, "schema": {"type": "string", "title": "Namespace"}},
    {"name": "key", "in": "path", "required": True, "schema": {"type": "string", "title": "Key"}},
]
_REDIRECT_HELP = "Prefer a 307 to a short-lived signed URL when the server hands them out."
_LIVE_HELP = "1: a job following the namespace fetches it (counted as live)"
_GET_PARAMETERS: list[dict[str, Any]] = [
    *_ENTRY_PATH_PARAMETERS,
    {
        "name": "redirect",
        "in": "query",
        "required": False,
        "description": _REDIRECT_HELP,
        "schema": {"type": "boolean", "default": False, "title": "Redirect", "description": _REDIRECT_HELP},
    },
    {"name": "if-none-match", "in": "header", "required": False, "schema": {"type": "string"}},
    {
        "name": "x-live-delivery",
        "in": "header",
        "required": False,
        "description": _LIVE_HELP,
        "schema": {"type": "string", "description": _LIVE_HELP},
    },
]
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


def _flag(request: Request, name: str) -> bool:
    """A boolean query parameter, spelled as FastAPI's own accept them; absent is false."""
    value = request.query_params.get(name)
    if value is None:
        return False
    spelled = value.lower()
    if spelled in _TRUE or spelled in _FALSE:
        return spelled in _TRUE
    raise BadRequest(f"The query parameter {name!r} must be true or false (1 or 0), not {value!r}.")


@router.get(
    "/entries/{key:path}",
    response_class=StreamingResponse,
    responses={307: {"description": "With ?redirect=1 on a server that signs URLs: download from Location"}},
    openapi_extra={"parameters": copy.deepcopy(_GET_PARAMETERS)},  # FastAPI keeps what it is given
)
@declare(
    Role.READ,
    Scope.PATH_NAMESPACE,
    answers={"304": "If-None-Match names the entry's digest", "404": "No such entry (a miss)"},
)
async def get_entry(request: Request) -> Response:
    """Download an entry's bytes with ``ETag`` and ``X-Content-SHA256``; 404 on a miss (counted).

    With ``?redirect=1`` a server that hands out signed URLs answers 307 to one instead (same headers,
    plus ``X-Content-Length``); any other server streams the bytes as usual.
    """
    namespace, key = request.path_params["namespace"], request.path_params["key"]
    service = get_service(request)
    headers = request.headers
    wish = ReadWish(
        if_none_match=headers.get("if-none-match") or None,
        redirect=_flag(request, "redirect"),
        live=headers.get("x-live-delivery") == "1",
    )
    # An entry read a moment ago is answered from memory, here on the event loop (cache_server.service.hot);
    # else one hop to a worker thread does the lookup and, for a small entry, reads and verifies it whole.
    read = service.read_hot(namespace, key, wish)
    if read is None:
        read = await anyio.to_thread.run_sync(service.read_entry, namespace, key, wish)
    if isinstance(read, NotModified):
        return Response(status_code=304, headers={"ETag": f'"{read.entry.sha256}"'})
    if isinstance(read, OpenedEntry):
        if read.content is not None:
            return Response(
                read.content, media_type="application/octet-stream", headers=_entry_headers(read.entry)
            )
        return StreamingResponse(
            read.body, media_type="application/octet-stream", headers=_entry_headers(read.entry)
        )
    return redirect_to(read)


@router.head("/entries/{key:path}", openapi_extra={"parameters": copy.deepcopy(_ENTRY_PATH_PARAMETERS)})
@declare(Role.READ, Scope.PATH_NAMESPACE, answers={"404": "No such entry"})
async def head_entry(request: Request) -> Response:
    """Whether an entry exists, with its size and digest headers (not counted as a hit)."""
    namespace, key = request.path_params["namespace"], request.path_params["key"]
    service = get_service(request)
    entry = service.head_hot(namespace, key)
    if entry is None:
        entry = await anyio.to_thread.run_sync(service.head_entry, namespace, key)
    return Response(headers=_entry_headers(entry), media_type="application/octet-stream")


@router.delete("/entries/{key:path}", status_code=status.HTTP_204_NO_CONTENT)
@declare(Role.ADMIN, Scope.PATH_NAMESPACE, answers={"404": "No such entry"})
def delete_entry(namespace: str, key: str, service: ServiceDep) -> Response:
    """Remove an entry (index row first, then the blob)."""
    service.delete_entry(namespace, key)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/missing", response_model=MissingOut)
@declare(Role.READ, Scope.PATH_NAMESPACE)
def missing(namespace: str, body: KeysRequest, service: ServiceDep) -> MissingOut:
    """Which of these keys the server lacks (ask before uploading)."""
    return MissingOut(missing=service.missing(namespace, body.keys))


@router.get("/manifest", response_model=ManifestOut)
@declare(Role.READ, Scope.PATH_NAMESPACE)
def manifest(
    namespace: str,
    service: ServiceDep,
    request: Request,
    max_bytes: Annotated[
        int | None, Query(ge=0, le=INDEX_INT_MAX, description="At most this many bytes of entries.")
    ] = None,
    max_entries: Annotated[
        int | None, Query(ge=0, le=INDEX_INT_MAX, description="At most this many entries.")
    ] = None,
) -> Response:
    """The entries worth warming, most useful first (hits, then recency), within the bounds, and how many
    bundles to stream from this server at once."""
    entries = service.manifest(namespace, max_bytes=max_bytes, max_entries=max_entries)
    # A :class:`ManifestOut`, written straight from the rows: a model per entry cost a third of the answer.
    out = {
        "namespace": namespace,
        "entries": [
            {
                "key": e.key,
                "size": e.size,
                "sha256": e.sha256,
                "pack": e.pack,
                "signature": e.signature,
                "prefilled": e.uploader if is_prefilled(e.uploader) else None,
            }
            for e in entries
        ],
        "total_bytes": sum(e.size for e in entries),
        "bundle_streams": get_settings(request).workers,
    }
    return Response(json_body(out), media_type="application/json")


@router.post("/bundle", response_class=StreamingResponse)
@declare(Role.READ, Scope.PATH_NAMESPACE)
def bundle(
    namespace: str,
    body: KeysRequest,
    service: ServiceDep,
    request: Request,
    accept_encoding: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """One ``application/x-tar`` stream of the stored entries among these keys (member name = key).

    Keys the server lacks are left out; each member carries a ``XLA_CACHE.sha256`` PAX header. For a client
    that accepts ``zstd`` (``Accept-Encoding``) the stream is zstd-compressed (``Content-Encoding: zstd``)
    unless ``XLA_CACHE_BUNDLE_COMPRESSION`` is off.
    """
    stream = service.bundle(namespace, body.keys)
    headers = {"Vary": "Accept-Encoding"}
    if get_settings(request).bundle_compression and accepts_zstd(accept_encoding):
        stream = zstd_compressed(stream)
        headers["Content-Encoding"] = "zstd"
    return StreamingResponse(stream, media_type="application/x-tar", headers=headers)
