"""Routes for entries: upload, download, existence, delete, missing, manifest and bundle."""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.to_thread
from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from cache_protocol import COMPILE_TIME_HEADER, SHA256_HEADER
from cache_protocol.tar import BadTar, TarReader, TarTooLarge
from cache_server.api.auth import principal
from cache_server.api.deps import ServiceDep, get_service, get_settings, get_tokens
from cache_server.api.errors import status_of
from cache_server.api.schemas import (
    INDEX_INT_MAX,
    BulkOut,
    KeysRequest,
    ManifestOut,
    MissingOut,
    PutOut,
)
from cache_server.api.signed_urls import redirect_to
from cache_server.domain import EntryInfo
from cache_server.errors import (
    BadRequest,
    BodyTimeout,
    ClientAborted,
    UnsupportedEncoding,
    UploadsBusy,
    UploadTooLarge,
)
from cache_server.names import check_key, check_namespace, check_sha256
from cache_server.revocation import StillAllowed
from cache_server.service import NotModified, OpenedEntry, ReadWish
from cache_server.service.bulk import BulkResult, MemberOutcome
from cache_server.streams import (
    PIECE,
    ZSTD_PIECE,
    Coalescer,
    NotZstd,
    accepts_zstd,
    zstd_compressed,
    zstd_decompressed,
)

__all__ = ["UploadSlots", "router", "upload_slots"]

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/namespaces/{namespace}", tags=["entries"])


class UploadSlots:
    """The worker threads of entry uploads, apart from the default thread limiter the sync routes use.

    An upload holds a thread for as long as its body takes to arrive, so uploads that stall must not take
    the threads that ``/healthz``, downloads and ``/metrics`` need: at most ``size`` uploads run at once
    (``XLA_CACHE_MAX_CONCURRENT_UPLOADS``), each on a thread of this limiter, and one more waits at most
    ``wait_seconds`` (``XLA_CACHE_UPLOAD_WAIT_SECONDS``) for a slot before it is refused with 503.
    Build it on the event loop that serves the app (the app's lifespan does).
    """

    def __init__(self, size: int, wait_seconds: float) -> None:
        self.size = size
        self.wait_seconds = wait_seconds
        self._slots = anyio.Semaphore(size)
        self.threads = anyio.CapacityLimiter(size)  # never waits: a slot is taken first

    @property
    def in_use(self) -> int:
        return self.size - self._slots.value

    @asynccontextmanager
    async def slot(self, request: Request | None = None) -> AsyncIterator[None]:
        """Hold one upload slot; :class:`UploadsBusy` when none frees up within ``wait_seconds``
        (:class:`ClientAborted` when the ``request``'s client hung up meanwhile: not a server error)."""
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            with anyio.move_on_after(self.wait_seconds) as waited:
                await self._slots.acquire()
            if waited.cancelled_caught:
                if request is not None and await _hung_up(request):
                    raise ClientAborted("The client went away while its upload waited for a slot.") from None
                raise UploadsBusy(
                    f"All {self.size} upload slots stayed busy for {self.wait_seconds:g} s "
                    "(XLA_CACHE_MAX_CONCURRENT_UPLOADS); retry later."
                ) from None
        try:
            yield
        finally:
            self._slots.release()


async def _hung_up(request: Request, seconds: float = 0.1) -> bool:
    """Whether the client has gone: read (and drop) what arrived of the body for up to ``seconds``. The
    server only sees a hang-up once it has read what came before it (``is_disconnected`` is not enough)."""
    with anyio.move_on_after(seconds):
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return True
            if not message.get("more_body", False):
                return False
    return False


def upload_slots(request: Request) -> UploadSlots:
    """The app's upload slots (made by its lifespan; made here when the app runs without one)."""
    slots: UploadSlots | None = getattr(request.app.state, "upload_slots", None)
    if slots is None:
        settings = get_settings(request)
        slots = UploadSlots(settings.max_concurrent_uploads, settings.upload_wait_seconds)
        request.app.state.upload_slots = slots
    return slots


@dataclass(frozen=True)
class _BulkLimits:
    """What bounds a bulk upload besides the pause and rate of every upload (see :class:`_UploadBody`)."""

    bytes: int
    seconds: float
    header_bytes: int


class _UploadBody:
    """The request body in pieces of at least ``piece`` bytes, but the last (each crosses to the worker thread
    in one hop): a MiB, or :data:`~cache_server.streams.ZSTD_PIECE` of a compressed body, so that the server
    stores a compressed push as it arrives rather than after its last MiB.

    A pause of more than ``idle_timeout`` seconds between two pieces off the network ends the upload with
    :class:`BodyTimeout`, and so does a body that trickles: after its first ``idle_timeout`` seconds an
    upload must have averaged ``min_rate`` bytes a second since it began (a client sending a byte every
    few seconds would otherwise hold an upload slot for hours). ``received`` counts the bytes that arrived.
    ``limits`` (a bulk upload's) also end it after ``seconds`` (:class:`BodyTimeout`) or ``bytes``
    (:class:`UploadTooLarge`).
    """

    def __init__(
        self,
        request: Request,
        idle_timeout: float,
        min_rate: int,
        piece: int = PIECE,
        limits: _BulkLimits | None = None,
    ) -> None:
        self._request = request
        self._piece = piece
        self._idle_timeout = idle_timeout
        self._min_rate = min_rate
        self._limits = limits
        self.received = 0
        self.ended_by = ""  # why a BodyTimeout was raised, for the log line

    def _wait_limit(self, started: float) -> tuple[float, bool]:
        """How long the next piece may take, and whether that limit is the rate's (not the pause's or the
        longest duration's)."""
        self._check_duration(started)
        now = time.monotonic()
        limit, by_rate = self._idle_timeout, False
        if self._min_rate:
            budget = started + self._idle_timeout + self.received / self._min_rate - now
            if budget < limit:
                limit, by_rate = budget, True
        if self._limits is not None and started + self._limits.seconds - now < limit:
            limit, by_rate = started + self._limits.seconds - now, False
        return limit, by_rate

    def _check_duration(self, started: float) -> None:
        """:class:`BodyTimeout` once a body with ``limits`` has taken their ``seconds``."""
        if self._limits is not None and time.monotonic() - started >= self._limits.seconds:
            self.ended_by = "took too long"
            raise BodyTimeout(
                f"The upload took longer than {self._limits.seconds:g} s (XLA_CACHE_MAX_BULK_SECONDS), "
                f"{self.received} bytes; nothing more was stored: split it into several requests."
            )

    async def pieces(self) -> AsyncIterator[bytes]:
        joiner = Coalescer(self._piece)
        stream = self._request.stream().__aiter__()
        started = last = time.monotonic()
        while True:
            limit, by_rate = self._wait_limit(started)
            with anyio.move_on_after(max(limit, 0.0)) as waited:
                chunk = await anext(stream, None)
            if waited.cancelled_caught:
                self._check_duration(started)
                now = time.monotonic()
                if by_rate and now - last < 0.99 * self._idle_timeout:
                    self.ended_by = "arrived too slowly"
                    raise BodyTimeout(
                        f"The upload arrived too slowly: {self.received} bytes in "
                        f"{now - started:.0f} s, under {self._min_rate} bytes/s "
                        "(XLA_CACHE_MIN_UPLOAD_BYTES_PER_SECOND); nothing was stored."
                    )
                self.ended_by = "stopped arriving"
                raise BodyTimeout(
                    f"The upload stopped arriving: nothing for {self._idle_timeout:g} s after "
                    f"{self.received} bytes (XLA_CACHE_BODY_TIMEOUT_SECONDS); nothing was stored."
                )
            if chunk is None:
                break
            last = time.monotonic()
            self.received += len(chunk)
            if self._limits is not None and self.received > self._limits.bytes:
                raise UploadTooLarge(
                    f"The upload is longer than {self._limits.bytes} bytes (XLA_CACHE_MAX_BULK_BYTES); "
                    "nothing more was stored: split it into several requests."
                )
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


def _still_allowed(request: Request) -> StillAllowed | None:
    """Whether the token the request was allowed with is still active, for an upload to ask as it goes
    (:mod:`cache_server.revocation`); None with auth off."""
    who = principal(request)
    if who is None:
        return None
    tokens = get_tokens(request)
    return lambda: tokens.is_active(who.token_id)


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
    400 the body does not match its digest; 413 larger than ``XLA_CACHE_MAX_ENTRY_BYTES``; 408 the body
    paused longer than ``XLA_CACHE_BODY_TIMEOUT_SECONDS``, or arrived slower than
    ``XLA_CACHE_MIN_UPLOAD_BYTES_PER_SECOND`` after those seconds; 503 (with ``Retry-After``) every upload
    slot stayed busy for ``XLA_CACHE_UPLOAD_WAIT_SECONDS``; 507 the entry would take the namespace or the
    token past its quota (``GET /admin/quotas``), or the namespace is new and the token has created
    ``XLA_CACHE_MAX_NAMESPACES_PER_TOKEN`` already: refused by the declared Content-Length before the body
    is read (without one, once measured: its blob is then removed). A client that disconnects mid-body is
    logged in one line and counted as 499. Whatever ends an upload early, nothing of it is stored.
    """
    check_namespace(namespace)
    check_key(key)
    sha256 = check_sha256(x_content_sha256)
    declared = _optional_int("Content-Length", request.headers.get("content-length"))
    compile_ms = _optional_int(COMPILE_TIME_HEADER, x_compile_time_ms)
    service.check_upload_size(declared)
    who = principal(request)
    stored_by = who.token_id if who is not None else None
    still_allowed = _still_allowed(request)
    settings = get_settings(request)
    upload = _UploadBody(request, settings.body_timeout_seconds, settings.min_upload_bytes_per_second)
    slots = upload_slots(request)
    async with slots.slot(request):
        body = _blocking_body(upload.pieces().__aiter__())
        try:
            result = await anyio.to_thread.run_sync(
                lambda: service.put_entry(
                    namespace,
                    key,
                    body,
                    sha256=sha256,
                    declared_size=declared,
                    compile_time_ms=compile_ms,
                    uploader=x_uploader,
                    stored_by=stored_by,
                    still_allowed=still_allowed,
                ),
                limiter=slots.threads,
            )
        except ClientDisconnect:
            log.info("client aborted the upload of %s/%s after %d bytes", namespace, key, upload.received)
            raise ClientAborted(
                f"The client went away after sending {upload.received} bytes; nothing was stored."
            ) from None
        except BodyTimeout:
            log.info(
                "the upload of %s/%s %s after %d bytes; refused with 408",
                namespace,
                key,
                upload.ended_by,
                upload.received,
            )
            raise
    response.status_code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
    return PutOut(
        namespace=namespace, key=key, size=result.size, sha256=result.sha256, created=result.created
    )


@router.post(
    "/entries",
    response_model=BulkOut,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def put_entries(namespace: str, request: Request, service: ServiceDep) -> Response:
    """Upload many entries in one ``application/x-tar`` stream: each member a regular file named by its key,
    with PAX records ``XLA_CACHE.sha256`` (required) and ``XLA_CACHE.compile_time_ms`` (optional), at most
    ``XLA_CACHE_MAX_KEYS_PER_REQUEST`` members; ``Content-Encoding: zstd`` for a compressed stream (415 for
    another encoding).

    200 with every member's result: the status a ``PUT`` of it would have had (201 stored, 200 already
    stored with this digest, 409 stored with another, 400 bad name, digest record or bytes, 413 too large,
    507 past a quota of the namespace or the token: nothing of it stored); a member's 201 or 200 means it
    survives a crash, as for a ``PUT``. 507 for the whole request when a quota is full already. 400 for a
    stream that is not a tar stream this server accepts (only regular files; bounded PAX headers; every zstd
    frame whole; nothing but zero bytes after the tar stream's end); what was committed before the error
    stays.

    Bounds: 413 ``upload_too_large`` once the stream (or the body as sent) passes
    ``XLA_CACHE_MAX_BULK_BYTES`` (at once when a member's declared size would take it past) or more than
    ``XLA_CACHE_MAX_BULK_HEADER_BYTES`` of headers come between two members; 408 once the body has taken
    ``XLA_CACHE_MAX_BULK_SECONDS``. 401 ``token_revoked`` when the token is revoked while the stream is in
    flight (nothing more is stored; see the README's trust model). Each of these ends the stream: the groups
    committed before it stay (unless purged), nothing after it is stored. Pauses, rate, upload slots and
    aborted clients as for ``PUT``.
    """
    check_namespace(namespace)
    who = principal(request)
    stored_by = who.token_id if who is not None else None
    still_allowed = _still_allowed(request)
    settings = get_settings(request)
    encoding = (request.headers.get("content-encoding") or "identity").strip().lower()
    if encoding not in ("identity", "zstd"):
        raise UnsupportedEncoding(
            f"Content-Encoding {encoding!r} is not taken here: send the tar stream as it is, or zstd."
        )
    limits = _BulkLimits(settings.max_bulk_bytes, settings.max_bulk_seconds, settings.max_bulk_header_bytes)
    declared = _optional_int("Content-Length", request.headers.get("content-length"))
    if declared is not None and declared > limits.bytes:
        raise UploadTooLarge(
            f"The upload is {declared} bytes; the limit is {limits.bytes} bytes (XLA_CACHE_MAX_BULK_BYTES): "
            "split it into several requests."
        )
    upload = _UploadBody(
        request,
        settings.body_timeout_seconds,
        settings.min_upload_bytes_per_second,
        piece=ZSTD_PIECE if encoding == "zstd" else PIECE,
        limits=limits,
    )
    slots = upload_slots(request)

    def store_all() -> bytes:
        pieces: Iterator[bytes] = _blocking_body(upload.pieces().__aiter__())
        if encoding == "zstd":
            pieces = zstd_decompressed(pieces)
        reader = TarReader(
            lambda _size: next(pieces, b""),
            max_members=settings.max_keys_per_request,
            max_bytes=limits.bytes,
            max_header_bytes=limits.header_bytes,
        )
        try:
            result = service.put_entries(
                namespace, reader.members(), stored_by=stored_by, still_allowed=still_allowed
            )
        except TarTooLarge as exc:
            raise UploadTooLarge(
                f"The upload is cut: {exc} (XLA_CACHE_MAX_BULK_BYTES, XLA_CACHE_MAX_BULK_HEADER_BYTES); "
                "nothing from there on was stored."
            ) from None
        except (BadTar, NotZstd) as exc:
            raise BadRequest(f"The upload is not a tar stream this server takes: {exc}.") from None
        return _bulk_body(namespace, result)

    async with slots.slot(request):
        try:
            result = await anyio.to_thread.run_sync(store_all, limiter=slots.threads)
        except ClientDisconnect:
            log.info("client aborted a bulk upload to %s after %d bytes", namespace, upload.received)
            raise ClientAborted(
                f"The client went away after sending {upload.received} bytes; the groups of entries "
                "committed before that are stored."
            ) from None
        except (BodyTimeout, UploadTooLarge) as exc:
            log.info("a bulk upload to %s was cut after %d bytes: %s", namespace, upload.received, exc.code)
            raise
    return Response(result, media_type="application/json")


def _json_body(out: object) -> bytes:
    """A JSON body written without a response model (for answers with a row per entry: see callers)."""
    return json.dumps(out, separators=(",", ":")).encode()


def _bulk_body(namespace: str, result: BulkResult) -> bytes:
    """The :class:`BulkOut` of ``result``, written straight from its members (on the worker thread): a
    model per member, validated and serialized in the event loop, cost as much as storing small ones."""
    stored, already = result.stored, result.already_stored
    out = {
        "namespace": namespace,
        "stored": stored,
        "already_stored": already,
        "refused": len(result.results) - stored - already,
        "results": [_member_out(member) for member in result.results],
    }
    return _json_body(out)


def _member_out(member: MemberOutcome) -> dict[str, object]:
    """A :class:`BulkMemberOut`: the status a ``PUT`` of the member would have had."""
    error = member.error
    if error is not None:
        status, code, detail = status_of(error), error.code, error.detail
    else:
        status, code, detail = (201 if member.stored else 200), None, None
    return {
        "key": member.key,
        "status": status,
        "size": member.size,
        "sha256": member.sha256,
        "error": code,
        "detail": detail,
    }


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
    # An entry read a moment ago is answered from memory, here on the event loop (cache_server.hot); else
    # one hop to a worker thread does the lookup and, for a small entry, reads and verifies it whole.
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
async def head_entry(request: Request) -> Response:
    """Whether an entry exists, with its size and digest headers (not counted as a hit)."""
    namespace, key = request.path_params["namespace"], request.path_params["key"]
    service = get_service(request)
    entry = service.head_hot(namespace, key)
    if entry is None:
        entry = await anyio.to_thread.run_sync(service.head_entry, namespace, key)
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
        "entries": [{"key": e.key, "size": e.size, "sha256": e.sha256, "pack": e.pack} for e in entries],
        "total_bytes": sum(e.size for e in entries),
        "bundle_streams": get_settings(request).workers,
    }
    return Response(_json_body(out), media_type="application/json")


@router.post("/bundle", response_class=StreamingResponse)
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
