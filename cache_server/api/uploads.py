"""Routes that upload entries: one entry (``PUT``) or many in one tar stream (``POST``). Both run in an
upload slot, their bodies read as :mod:`cache_server.api.bodies` paces them, and store through the one
entry writer (:mod:`cache_server.service.writer`)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from typing import Annotated

import anyio
import anyio.to_thread
from fastapi import APIRouter, Header, Request, Response, status
from starlette.requests import ClientDisconnect

from cache_protocol import COMPILE_TIME_HEADER, UPLOADER_HEADER
from cache_protocol.tar import BadTar, TarReader, TarTooLarge
from cache_server import metrics
from cache_server.api.access import QUOTA, Scope, declare
from cache_server.api.auth import principal
from cache_server.api.bodies import BulkLimits, UploadBody, blocking_body
from cache_server.api.deps import ServiceDep, get_settings, get_tokens, get_upload_slots
from cache_server.api.errors import status_of
from cache_server.api.schemas import BulkOut, PutOut, json_body
from cache_server.auth.revocation import StillAllowed
from cache_server.auth.tokens import Role
from cache_server.errors import (
    BadRequest,
    BodyTimeout,
    ClientAborted,
    UnsupportedEncoding,
    UploadTooLarge,
)
from cache_server.names import check_sha256
from cache_server.service import BulkResult, MemberOutcome
from cache_server.streams import PIECE, ZSTD_PIECE, NotZstd, zstd_decompressed

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/namespaces/{namespace}", tags=["entries"])


def _still_allowed(request: Request) -> StillAllowed | None:
    """Whether the token the request was allowed with is still active, for an upload to ask as it goes
    (:mod:`cache_server.auth.revocation`); None with auth off."""
    who = principal(request)
    if who is None:
        return None
    tokens = get_tokens(request)
    return lambda: tokens.is_active(who.token_id)


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
@declare(
    Role.WRITE,
    Scope.PATH_NAMESPACE,
    answers={"409": "Stored with another digest; the first upload stays", "507": QUOTA},
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
    x_entry_signature: Annotated[str | None, Header()] = None,
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
    ``X-Entry-Signature``: the uploader's Ed25519 signature, kept with the entry; 403 ``signature_required``
    or ``signature_invalid`` where ``XLA_CACHE_REQUIRE_SIGNATURES`` refuses it, before the body is read.
    """
    # The name, size, compile time, signature and quotas are checked once, by the writer, before the body
    # is read (service/writer.py: begin and prepare); here only the headers are read as numbers.
    sha256 = check_sha256(x_content_sha256)
    declared = _optional_int("Content-Length", request.headers.get("content-length"))
    compile_ms = _optional_int(COMPILE_TIME_HEADER, x_compile_time_ms)
    who = principal(request)
    stored_by = who.token_id if who is not None else None
    still_allowed = _still_allowed(request)
    settings = get_settings(request)
    upload = UploadBody(request, settings.body_timeout_seconds, settings.min_upload_bytes_per_second)
    slots = get_upload_slots(request)
    async with slots.slot(request):
        body = blocking_body(upload.pieces().__aiter__())
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
                    signature=x_entry_signature,
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
@declare(Role.WRITE, Scope.PATH_NAMESPACE, answers={"507": QUOTA})
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
    flight (nothing more is stored; see docs/trust.md). Each of these ends the stream: the groups
    committed before it stay (unless purged), nothing after it is stored. Pauses, rate, upload slots and
    aborted clients as for ``PUT``.
    """
    who = principal(request)
    stored_by = who.token_id if who is not None else None
    still_allowed = _still_allowed(request)
    settings = get_settings(request)
    encoding = (request.headers.get("content-encoding") or "identity").strip().lower()
    if encoding not in ("identity", "zstd"):
        raise UnsupportedEncoding(
            f"Content-Encoding {encoding!r} is not taken here: send the tar stream as it is, or zstd."
        )
    limits = BulkLimits(settings.max_bulk_bytes, settings.max_bulk_seconds, settings.max_bulk_header_bytes)
    declared = _optional_int("Content-Length", request.headers.get("content-length"))
    if declared is not None and declared > limits.bytes:
        raise UploadTooLarge(
            f"The upload is {declared} bytes; the limit is {limits.bytes} bytes (XLA_CACHE_MAX_BULK_BYTES): "
            "split it into several requests."
        )
    upload = UploadBody(
        request,
        settings.body_timeout_seconds,
        settings.min_upload_bytes_per_second,
        piece=ZSTD_PIECE if encoding == "zstd" else PIECE,
        limits=limits,
    )
    slots = get_upload_slots(request)

    def store_all() -> bytes:
        pieces: Iterator[bytes] = blocking_body(upload.pieces().__aiter__())
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
                namespace,
                reader.members(),
                stored_by=stored_by,
                still_allowed=still_allowed,
                uploader=request.headers.get(UPLOADER_HEADER),
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


def _bulk_body(namespace: str, result: BulkResult) -> bytes:
    """The :class:`BulkOut` of ``result``, written straight from its members (on the worker thread): a
    model per member, validated and serialized in the event loop, cost as much as storing small ones."""
    stored, already = result.stored, result.already_stored
    members = [_member_out(member) for member in result.results]
    # Refused members hide in a 200 answer: counted by status here, for the uploads-refused alert.
    for code, count in Counter(str(member["status"]) for member in members).items():
        metrics.BULK_MEMBERS.labels(code).inc(count)
    out = {
        "namespace": namespace,
        "stored": stored,
        "already_stored": already,
        "refused": len(result.results) - stored - already,
        "results": members,
    }
    return json_body(out)


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
