"""Signed URLs: short-lived links to an entry's blob, so many hosts fetch bytes from the bucket and not
through the server. Handed out when ``XLA_CACHE_SIGNED_URL_SECONDS`` > 0 and the store can sign
(:class:`~cache_server.storage.abilities.SignsUrls`).

A URL is made locally, without asking the store whether the blob is there: the consistency rules (blob
before row, row removed before blob) make a row without a blob rare, and then the download itself answers
404.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cache_server.background.access import AccessRecorder
from cache_server.domain import EntryInfo, EntryRef
from cache_server.errors import SignedUrlsUnavailable
from cache_server.index.entries import EntryRepository
from cache_server.names import check_keys, check_namespace
from cache_server.settings import Settings
from cache_server.storage.abilities import SignsUrls
from cache_server.storage.base import BlobStore, blob_name

__all__ = ["SignedEntry", "SignedUrls", "Signing"]


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


class Signing:
    """Signs URLs for entries of the index's :class:`EntryRepository` in one store; ``access`` counts each
    signed entry as a hit and each absent key as a miss."""

    def __init__(
        self, settings: Settings, entries: EntryRepository, store: BlobStore, access: AccessRecorder
    ) -> None:
        self._settings = settings
        self._entries = entries
        self._access = access
        self._seconds = settings.signed_url_seconds
        self._store = store if self._seconds > 0 and isinstance(store, SignsUrls) else None

    @property
    def on(self) -> bool:
        """Whether this server hands out signed URLs at all."""
        return self._store is not None

    def sign(self, entry: EntryInfo) -> SignedEntry | None:
        """A URL for the entry, or None when this server does not sign or the store's credentials cannot."""
        if self._store is None:
            return None
        url = self._store.signed_url(blob_name(entry.namespace, entry.key), self._seconds)
        if url is None:
            return None
        return SignedEntry(key=entry.key, url=url, size=entry.size, sha256=entry.sha256)

    def _sign_all(self, store: SignsUrls, entries: Sequence[EntryRef]) -> list[SignedEntry] | None:
        """URLs for all of ``entries`` (signed together), or None when the store's credentials cannot sign."""
        names = [blob_name(entry.namespace, entry.key) for entry in entries]
        urls = store.signed_urls(names, self._seconds) if names else {}
        if urls is None or any(name not in urls for name in names):
            return None
        return [
            SignedEntry(key=entry.key, url=urls[name], size=entry.size, sha256=entry.sha256)
            for entry, name in zip(entries, names, strict=True)
        ]

    def sign_entries(self, namespace: str, keys: Sequence[str]) -> SignedUrls:
        """Signed URLs for the stored entries among ``keys`` (each a hit; each absent key a miss).

        Raises :class:`SignedUrlsUnavailable` when this server does not hand out signed URLs.
        """
        check_namespace(namespace)
        wanted = check_keys(keys, self._settings.max_keys_per_request)
        if self._store is None:
            raise SignedUrlsUnavailable(
                "This server does not hand out signed URLs (XLA_CACHE_SIGNED_URL_SECONDS is 0, or its "
                "storage is not Google Cloud Storage); download the entries with POST .../bundle instead."
            )
        rows = self._entries.get_entries(namespace, wanted)
        signed = self._sign_all(self._store, [rows[key] for key in wanted if key in rows])
        if signed is None:
            raise SignedUrlsUnavailable(
                "This server's storage credentials cannot sign URLs (they need a service-account key, or a "
                "service account allowed to sign through IAM); download the entries with POST .../bundle."
            )
        for item in signed:
            self._access.hit(namespace, item.key, item.size)
        missing = [key for key in wanted if key not in rows]
        if missing:
            self._access.miss(namespace, len(missing))
        return SignedUrls(expires_in=self._seconds, entries=signed, missing=missing)
