"""Validation of the names and digests that reach storage paths and SQL rows, as domain errors.

The rules themselves are the protocol's (:mod:`cache_protocol`, shared with the client); this module turns a
refusal into :class:`~cache_server.errors.InvalidName` or :class:`~cache_server.errors.BadRequest`. Every
namespace and key is checked here before anything else touches it, so no path is built from unchecked input.
"""

from __future__ import annotations

from collections.abc import Sequence

from cache_protocol import SHA256_HEADER, SHA256_PATTERN, name_problem
from cache_server.errors import BadRequest, InvalidName, TooManyKeys

__all__ = ["check_key", "check_keys", "check_namespace", "check_sha256"]


def check_namespace(value: str) -> str:
    """Return ``value`` if it is a valid namespace name, else raise :class:`InvalidName`."""
    problem = name_problem("namespace", value)
    if problem is not None:
        raise InvalidName(problem)
    return value


def check_key(value: str) -> str:
    """Return ``value`` if it is a valid entry key, else raise :class:`InvalidName`."""
    problem = name_problem("key", value)
    if problem is not None:
        raise InvalidName(problem)
    return value


def check_keys(keys: Sequence[str], limit: int) -> list[str]:
    """The keys of one request, checked and without duplicates; :class:`TooManyKeys` past ``limit``
    (``XLA_CACHE_MAX_KEYS_PER_REQUEST``)."""
    if len(keys) > limit:
        raise TooManyKeys(f"The request names {len(keys)} keys; at most {limit} are allowed in one request.")
    return list(dict.fromkeys(check_key(key) for key in keys))


def check_sha256(value: str | None) -> str:
    """Return the lower-case hex digest, or raise :class:`BadRequest` if it is missing or malformed."""
    if value is None or not value.strip():
        raise BadRequest(f"The {SHA256_HEADER} header is required: the hex SHA-256 digest of the body.")
    digest = value.strip().lower()
    if not SHA256_PATTERN.fullmatch(digest):
        raise BadRequest(
            f"The {SHA256_HEADER} header {value!r} is not a SHA-256 digest: "
            "64 hexadecimal characters expected."
        )
    return digest
