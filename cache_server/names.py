"""Validation of the names that reach storage paths and SQL rows.

Every namespace and key is checked here before anything else touches it, so no path is ever built from
unchecked input.
"""

from __future__ import annotations

import re

from cache_server.errors import InvalidName

__all__ = [
    "KEY_PATTERN",
    "NAMESPACE_PATTERN",
    "SHA256_PATTERN",
    "check_key",
    "check_namespace",
    "check_sha256",
]

NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,255}")
SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")


def _check(kind: str, value: str, pattern: re.Pattern[str], max_len: int) -> str:
    if not value:
        raise InvalidName(f"The {kind} name is empty.")
    if len(value) > max_len:
        raise InvalidName(f"The {kind} name is {len(value)} characters long; at most {max_len} are allowed.")
    if "\x00" in value:
        raise InvalidName(f"The {kind} name contains a NUL character.")
    if "/" in value or "\\" in value:
        raise InvalidName(f"The {kind} name {value!r} contains a slash; names are a single path segment.")
    if ".." in value:
        raise InvalidName(f"The {kind} name {value!r} contains '..'.")
    if not pattern.fullmatch(value):
        raise InvalidName(
            f"The {kind} name {value!r} is not allowed: it must start with a letter or digit "
            "and contain only letters, digits, '.', '_' and '-'."
        )
    return value


def check_namespace(value: str) -> str:
    """Return ``value`` if it is a valid namespace name, else raise :class:`InvalidName`."""
    return _check("namespace", value, NAMESPACE_PATTERN, 128)


def check_key(value: str) -> str:
    """Return ``value`` if it is a valid entry key, else raise :class:`InvalidName`."""
    return _check("key", value, KEY_PATTERN, 256)


def check_sha256(value: str | None) -> str:
    """Return the lower-case hex digest, or raise :class:`BadRequest` if it is missing or malformed."""
    from cache_server.errors import BadRequest

    if value is None or not value.strip():
        raise BadRequest("The X-Content-SHA256 header is required: the hex SHA-256 digest of the body.")
    digest = value.strip().lower()
    if not SHA256_PATTERN.fullmatch(digest):
        raise BadRequest(
            f"The X-Content-SHA256 header {value!r} is not a SHA-256 digest: "
            "64 hexadecimal characters expected."
        )
    return digest
