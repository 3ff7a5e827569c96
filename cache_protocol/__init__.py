"""What the server and the client agree on: names, limits, header names, the bundle's member header and the
fingerprint file. Both packages import it from here; it needs nothing beyond the standard library.

A namespace or key is one path segment on disk and in the blob store, so both are checked here before
anything builds a path or a row from them.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = [
    "BUNDLE_COMPILE_TIME_PAX",
    "BUNDLE_SHA256_PAX",
    "COMPILE_TIME_HEADER",
    "CONTENT_LENGTH_HEADER",
    "FINGERPRINT_FILE",
    "KEY_MAX_LENGTH",
    "KEY_PATTERN",
    "LIVE_HEADER",
    "MAX_COMPILE_TIME_MS",
    "MAX_KEYS_PER_REQUEST",
    "NAMESPACE_MAX_LENGTH",
    "NAMESPACE_PATTERN",
    "SHA256_HEADER",
    "SHA256_PATTERN",
    "UPLOADER_HEADER",
    "UPLOADER_MAX_LENGTH",
    "is_key",
    "is_namespace",
    "name_problem",
]

NAMESPACE_MAX_LENGTH = 128
KEY_MAX_LENGTH = 255  # a key is a file name in the local store and in every client's cache directory
NAMESPACE_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{NAMESPACE_MAX_LENGTH - 1}}}")
"""A namespace: a letter or digit, then letters, digits, '.', '_' or '-'; never containing '..'."""
KEY_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{KEY_MAX_LENGTH - 1}}}")
"""An entry key, like a namespace but longer (torch_xla's decimal graph hashes always match)."""
SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")
"""A SHA-256 digest as the API writes it: 64 lower-case hex digits."""

MAX_COMPILE_TIME_MS = 2**31 - 1
"""The largest ``X-Compile-Time-Ms`` the server keeps (24 days)."""
MAX_KEYS_PER_REQUEST = 10_000
"""The server's default bound on the keys of one ``missing``, ``bundle`` or ``urls`` request."""
UPLOADER_MAX_LENGTH = 256
"""The server keeps at most this much of ``X-Uploader``."""

SHA256_HEADER = "X-Content-SHA256"
"""The entry's SHA-256: required on upload, sent with every download."""
CONTENT_LENGTH_HEADER = "X-Content-Length"
"""The entry's size on a 307 to a signed URL (the redirect itself has no body)."""
COMPILE_TIME_HEADER = "X-Compile-Time-Ms"
"""On upload: how long the entry took to compile, credited to later hits as compile time saved."""
LIVE_HEADER = "X-Live-Delivery"
"""On a download: ``1`` when a job following the namespace fetches an entry another job just stored."""
UPLOADER_HEADER = "X-Uploader"
"""On upload: who uploaded it (``host:pid``), kept with the entry."""
BUNDLE_SHA256_PAX = "XLA_CACHE.sha256"
"""The PAX header of each bundle member that carries its SHA-256."""
BUNDLE_COMPILE_TIME_PAX = "XLA_CACHE.compile_time_ms"
"""The PAX header of a bulk upload's member that says what ``X-Compile-Time-Ms`` says of a single upload."""
FINGERPRINT_FILE = ".fingerprint.json"
"""In a namespace's local directory: its fingerprint, so ``xla-cache push`` needs no runtime."""


def name_problem(kind: Literal["namespace", "key"], value: str) -> str | None:
    """Why ``value`` is not a valid ``kind`` (``"namespace"`` or ``"key"``) name, or None if it is."""
    pattern, longest = (
        (NAMESPACE_PATTERN, NAMESPACE_MAX_LENGTH) if kind == "namespace" else (KEY_PATTERN, KEY_MAX_LENGTH)
    )
    if len(value) <= longest and ".." not in value and pattern.fullmatch(value):
        return None  # the usual case, first: the pattern admits no slash, backslash or NUL
    if not value:
        return f"The {kind} name is empty."
    if len(value) > longest:
        return f"The {kind} name is {len(value)} characters long; at most {longest} are allowed."
    if "\x00" in value:
        return f"The {kind} name contains a NUL character."
    if "/" in value or "\\" in value:
        return f"The {kind} name {value!r} contains a slash; names are a single path segment."
    if ".." in value:
        return f"The {kind} name {value!r} contains '..'."
    if not pattern.fullmatch(value):
        return (
            f"The {kind} name {value!r} is not allowed: it must start with a letter or digit "
            "and contain only letters, digits, '.', '_' and '-'."
        )
    return None


def is_namespace(value: str) -> bool:
    """Whether ``value`` is a valid namespace name."""
    return name_problem("namespace", value) is None


def is_key(value: str) -> bool:
    """Whether ``value`` is a valid entry key."""
    return name_problem("key", value) is None
