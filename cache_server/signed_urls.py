"""Direct downloads: short-lived signed URLs, so many hosts fetch bytes from the bucket, not the server.

On when ``XLA_CACHE_SIGNED_URL_SECONDS`` > 0 and the blob store can sign (GCS with signing credentials,
such as a service-account key). The index still decides what exists: a URL is only handed out for an
entry with an index row, with the size and SHA-256 the downloader must check, and each URL handed out
counts as a hit (the server never sees the download itself). A miss is counted as one.

The URL is made locally, without asking the store whether the blob is there: the consistency rules
(blob before row, row removed before blob) make a row without a blob rare, and then the download itself
answers 404.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from cache_server.errors import EntryNotFound, SignedUrlsUnavailable
from cache_server.names import check_key, check_namespace
from cache_server.service import CacheService
from cache_server.storage.base import blob_name

__all__ = ["SignedEntry", "SignedUrls", "UrlSigner", "sign_entries", "sign_entry"]


@runtime_checkable
class UrlSigner(Protocol):
    """A blob store that can make signed download URLs (:class:`~cache_server.storage.gcs.GcsBlobStore`)."""

    def signed_url(self, name: str, expires_seconds: int) -> str | None:
        """A URL anyone may GET for ``expires_seconds``; ``None`` when the store's credentials cannot sign."""
        ...


@dataclass(frozen=True)
class SignedEntry:
    """An entry, and a URL its bytes can be downloaded from until it expires."""

    key: str
    url: str
    size: int
    sha256: str


@dataclass(frozen=True)
class SignedUrls:
    """Signed URLs for the stored keys among those asked for, and the keys that are not stored."""

    expires_in: int
    entries: list[SignedEntry]
    missing: list[str]


def _signer(service: CacheService) -> tuple[UrlSigner, int] | None:
    seconds = service.settings.signed_url_seconds
    if seconds <= 0 or not isinstance(service.store, UrlSigner):
        return None
    return service.store, seconds


def sign_entry(service: CacheService, namespace: str, key: str) -> SignedEntry | None:
    """A signed URL for one entry (a hit), or ``None`` when this server does not sign (stream it instead).

    Raises :class:`EntryNotFound` (counted as a miss) when the entry is not stored.
    """
    check_namespace(namespace)
    check_key(key)
    signer = _signer(service)
    if signer is None:
        return None
    entry = service.repository.get_entry(namespace, key)
    if entry is None:
        service.access.miss(namespace)
        raise EntryNotFound(f"No entry {key!r} in namespace {namespace!r}.")
    store, seconds = signer
    url = store.signed_url(blob_name(namespace, key), seconds)
    if url is None:
        return None
    service.access.hit(namespace, key, entry.size)
    return SignedEntry(key=key, url=url, size=entry.size, sha256=entry.sha256)


def sign_entries(service: CacheService, namespace: str, keys: Sequence[str]) -> SignedUrls:
    """Signed URLs for the stored entries among ``keys`` (each a hit; each absent key a miss).

    Raises :class:`SignedUrlsUnavailable` when this server does not hand out signed URLs.
    """
    check_namespace(namespace)
    wanted = list(dict.fromkeys(service._check_keys(keys)))  # the same limits as missing and bundle
    signer = _signer(service)
    if signer is None:
        raise SignedUrlsUnavailable(
            "This server does not hand out signed URLs (XLA_CACHE_SIGNED_URL_SECONDS is 0, or its storage is "
            "not Google Cloud Storage); download the entries with POST .../bundle instead."
        )
    store, seconds = signer
    rows = service.repository.get_entries(namespace, wanted)
    signed: list[SignedEntry] = []
    for key in wanted:
        entry = rows.get(key)
        if entry is None:
            continue
        url = store.signed_url(blob_name(namespace, key), seconds)
        if url is None:
            raise SignedUrlsUnavailable(
                "This server's storage credentials cannot sign URLs (a service-account key is needed); "
                "download the entries with POST .../bundle instead."
            )
        signed.append(SignedEntry(key=key, url=url, size=entry.size, sha256=entry.sha256))
    for item in signed:
        service.access.hit(namespace, item.key, item.size)
    missing = [key for key in wanted if key not in rows]
    if missing:
        service.access.miss(namespace, len(missing))
    return SignedUrls(expires_in=seconds, entries=signed, missing=missing)
