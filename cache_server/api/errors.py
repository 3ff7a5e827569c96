"""The only place where errors become HTTP responses. Every error body is ``{"error", "detail"}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cache_server import errors

__all__ = [
    "CLIENT_CLOSED_REQUEST",
    "STATUS",
    "cache_error_response",
    "error_response",
    "install_error_handlers",
    "status_of",
]

log = logging.getLogger(__name__)

CLIENT_CLOSED_REQUEST = 499
"""nginx's status for a client that went away mid-request: logged and counted, never sent, never a 5xx."""

STATUS: dict[type[errors.CacheError], int] = {
    errors.InvalidName: 400,
    errors.BadRequest: 400,
    errors.TooManyKeys: 400,
    errors.DigestMismatch: 400,
    errors.DigestConflict: 409,
    errors.EntryTooLarge: 413,
    errors.BodyTooLarge: 413,
    errors.BodyTimeout: 408,
    errors.ClientAborted: CLIENT_CLOSED_REQUEST,
    errors.UploadsBusy: 503,
    errors.EntryInFlight: 503,
    errors.EntryNotFound: 404,
    errors.NamespaceNotFound: 404,
    errors.TokenNotFound: 404,
    errors.UnsupportedEncoding: 415,
    errors.StorageUnavailable: 503,
    errors.IndexUnavailable: 503,
    errors.Unauthorized: 401,
    errors.Forbidden: 403,
    errors.SignedUrlsUnavailable: 501,
    errors.PacksOff: 501,
    errors.TokenRevoked: 401,
    errors.UploadTooLarge: 413,
    errors.QuotaExceeded: 507,
    errors.RunOwned: 403,
    errors.RunConflict: 409,
    errors.RunAmbiguous: 409,
    errors.RunNotFound: 404,
    errors.GraphNotFound: 404,
    errors.RunsBusy: 503,
    errors.GraphsBusy: 503,
}

HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "entry_too_large",
}


def error_response(
    status: int, code: str, detail: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)


def status_of(exc: errors.CacheError) -> int:
    """The status a domain error is answered with (also each refused member of a bulk upload)."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def cache_error_response(exc: errors.CacheError) -> JSONResponse:
    """The answer to a domain error (also for middleware, which runs outside the exception handlers)."""
    status = status_of(exc)
    headers = None
    if status == 503:
        headers = {"Retry-After": "5"}
    elif status == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="xla-cache"'}
    elif status == 408 or isinstance(exc, errors.UploadTooLarge):
        headers = {"Connection": "close"}  # the rest of the body may still come: the connection is done
    return error_response(status, exc.code, exc.detail, headers)


def _describe_validation(exc: RequestValidationError) -> str:
    problems = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            return "The request body is not valid JSON."
        if tuple(err.get("loc", ())) == ("body",):
            return "The request body must be a JSON object, sent with Content-Type: application/json."
        where = ".".join(str(part) for part in err.get("loc", ()) if part != "body")
        problems.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
    return "The request is not valid: " + "; ".join(problems) + "."


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that turn every error into the JSON error shape."""

    @app.exception_handler(errors.CacheError)
    async def _cache_error(request: Request, exc: errors.CacheError) -> JSONResponse:
        response = cache_error_response(exc)
        if 500 <= response.status_code < 600:
            log.warning("%s %s: %s", request.method, request.url.path, exc.detail)
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(400, "bad_request", _describe_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404 and exc.detail == "Not Found":
            detail = f"There is no such resource: {request.method} {request.url.path}."
        elif exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}."
        else:
            detail = str(exc.detail)
        code = HTTP_CODES.get(exc.status_code, "error")
        return error_response(exc.status_code, code, detail, dict(exc.headers or {}) or None)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(
            exc, errors.ResponseBrokenOff
        ):  # one broken off on purpose was logged where it was found
            log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(
            500, "internal_error", "The server failed unexpectedly; the error has been logged."
        )
