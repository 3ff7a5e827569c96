"""Typed domain errors.

Everything the service can refuse is one of these. None of them knows about HTTP: the one place that
turns them into status codes is :mod:`cache_server.api.errors`.
"""

from __future__ import annotations

__all__ = [
    "BadRequest",
    "BodyTimeout",
    "BodyTooLarge",
    "CacheError",
    "ClientAborted",
    "DigestConflict",
    "DigestMismatch",
    "EntryInFlight",
    "EntryNotFound",
    "EntryRefused",
    "EntryTooLarge",
    "Forbidden",
    "IndexUnavailable",
    "InvalidName",
    "NamespaceNotFound",
    "QuotaExceeded",
    "ResponseBrokenOff",
    "RunAmbiguous",
    "RunConflict",
    "RunNotFound",
    "RunOwned",
    "SignatureInvalid",
    "SignatureRequired",
    "SignedUrlsUnavailable",
    "StorageUnavailable",
    "TokenNotFound",
    "TokenRevoked",
    "TooManyKeys",
    "Unauthorized",
    "UnsupportedEncoding",
    "UploadTooLarge",
    "UploadsBusy",
]


class ResponseBrokenOff(RuntimeError):
    """A response broken off part way on purpose (bytes found wrong as they streamed, after the status and
    headers went out): the connection closes short of its Content-Length, so no client takes the bytes as
    whole. Not a failure of the server: whoever raises it has logged why, in one line, and nothing above
    logs it again (:mod:`cache_server.api.errors`, and :mod:`cache_server.cli.serve` for uvicorn)."""


class CacheError(Exception):
    """Base class of every error the cache reports to a caller.

    ``code`` is a short stable identifier for scripts; ``detail`` is a sentence a person understands.
    """

    code = "cache_error"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class EntryRefused(CacheError):
    """Refused before anything of it is stored. Raised by the writer's checks of one entry (its name, size,
    digest, compile time, signature, quota), it refuses that entry alone: a bulk upload records it as that
    member's outcome and goes on with the others (:mod:`cache_server.service.bulk` catches this base, so
    a new check of the writer needs no list kept in step). Raised anywhere else, it refuses the request."""

    code = "entry_refused"


class InvalidName(EntryRefused):
    """A namespace or key name that does not match the allowed pattern."""

    code = "invalid_name"


class BadRequest(EntryRefused):
    """A request whose body or headers cannot be understood."""

    code = "bad_request"


class TooManyKeys(BadRequest):
    """A ``missing`` or ``bundle`` request naming more keys than one request may."""

    code = "too_many_keys"


class DigestMismatch(EntryRefused):
    """The uploaded bytes do not hash to the digest the uploader announced."""

    code = "digest_mismatch"


class DigestConflict(CacheError):
    """The key is already stored with another digest; the first upload stays."""

    code = "digest_conflict"


class EntryTooLarge(EntryRefused):
    """The upload is larger than ``XLA_CACHE_MAX_ENTRY_BYTES``."""

    code = "entry_too_large"


class BodyTooLarge(CacheError):
    """A request body (other than an entry upload) larger than ``XLA_CACHE_MAX_JSON_BYTES``."""

    code = "body_too_large"


class BodyTimeout(CacheError):
    """The request body stopped arriving: no bytes for ``XLA_CACHE_BODY_TIMEOUT_SECONDS``."""

    code = "body_timeout"


class ClientAborted(CacheError):
    """The client went away before its request body was complete; nothing it sent was kept.

    Nobody reads the answer; it is counted (status 499, as nginx names it) so that a client's abort never
    shows up as a server error.
    """

    code = "client_aborted"


class UploadsBusy(CacheError):
    """Every upload slot (``XLA_CACHE_MAX_CONCURRENT_UPLOADS``) stayed taken; retrying later may work."""

    code = "uploads_busy"


class EntryInFlight(CacheError):
    """The key's blob is stored but has no index row yet: an upload in flight, or one that died a moment
    ago (see :mod:`cache_server.service.taken_names`); retrying later may work."""

    code = "entry_in_flight"


class EntryNotFound(CacheError):
    """No entry with this key in this namespace."""

    code = "entry_not_found"


class NamespaceNotFound(CacheError):
    """The namespace has never been registered."""

    code = "namespace_not_found"


class UnsupportedEncoding(CacheError):
    """The request body's Content-Encoding is not one this route takes."""

    code = "unsupported_encoding"


class TokenNotFound(CacheError):
    """No token with this name or id."""

    code = "token_not_found"


class StorageUnavailable(CacheError):
    """The blob store cannot be reached or keeps failing; retrying later may work."""

    code = "storage_unavailable"


class SignedUrlsUnavailable(CacheError):
    """Signed URLs were asked for, but this server does not hand them out (off, or its store cannot sign)."""

    code = "signed_urls_unavailable"


class PacksOff(CacheError):
    """Packing was asked for, but this server writes no packs (off, or its store keeps none)."""

    code = "packs_off"


class IndexUnavailable(CacheError):
    """The SQL index cannot be reached; retrying later may work."""

    code = "index_unavailable"


class Unauthorized(CacheError):
    """No valid token: none was sent, or it is unknown or revoked."""

    code = "unauthorized"


class Forbidden(CacheError):
    """A valid token whose role is too weak for what was asked."""

    code = "forbidden"


class SignatureRequired(Forbidden, EntryRefused):
    """An unsigned upload into a namespace that requires signatures (``XLA_CACHE_REQUIRE_SIGNATURES``);
    nothing of it is stored."""

    code = "signature_required"


class SignatureInvalid(Forbidden, EntryRefused):
    """An upload whose signature is not a valid one, by a key the namespace accepts, over exactly this
    namespace, key and digest; nothing of it is stored."""

    code = "signature_invalid"


class TokenRevoked(Unauthorized):
    """The token an upload was sent with was revoked while the upload was in flight: the upload stopped,
    and what it stored after the revoke was removed (see docs/trust.md)."""

    code = "token_revoked"


class UploadTooLarge(CacheError):
    """A bulk upload longer than ``XLA_CACHE_MAX_BULK_BYTES``, or with more than
    ``XLA_CACHE_MAX_BULK_HEADER_BYTES`` of headers between two members; it ends there."""

    code = "upload_too_large"


class QuotaExceeded(EntryRefused):
    """An upload would take a namespace or a token past its quota (entries or bytes), or a token past the
    namespaces it may create; nothing of it is stored."""

    code = "quota_exceeded"


class RunOwned(Forbidden):
    """A run id another token reported first (the first token to report a run id owns it)."""

    code = "run_owned"


class RunConflict(CacheError):
    """A report of an existing run id with another namespace or framework than the run has."""

    code = "run_conflict"


class RunAmbiguous(CacheError):
    """A run id prefix that more than one run starts with (the detail lists them)."""

    code = "run_ambiguous"


class RunsBusy(CacheError):
    """Every slot for explaining a run's detail stayed taken (``run_details_at_once`` per server, all its
    processes together); retrying later may work."""

    code = "runs_busy"


class GraphsBusy(CacheError):
    """Every slot for building a bucketing report stayed taken (``graph_reports_at_once`` per server, all
    its processes together); retrying later may work."""

    code = "graphs_busy"


class GraphNotFound(CacheError):
    """The namespace holds no parsed graph (HLO module) of this name."""

    code = "graph_not_found"


class RunNotFound(CacheError):
    """No run report has this id (or the token may not see it)."""

    code = "run_not_found"
