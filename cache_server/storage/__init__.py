"""Blob stores: the protocol and its backends. :func:`open_store` picks one from a URL."""

from __future__ import annotations

from cache_server.storage.base import (
    BlobInfo,
    BlobReader,
    BlobStore,
    SignsUrls,
    SweepsTempFiles,
    blob_name,
    split_blob_name,
)

__all__ = [
    "BlobInfo",
    "BlobReader",
    "BlobStore",
    "SignsUrls",
    "SweepsTempFiles",
    "blob_name",
    "open_store",
    "split_blob_name",
]


def open_store(url: str, *, timeout: float = 30.0, retries: int = 5) -> BlobStore:
    """Build the blob store a storage URL names: ``file://...`` or ``gs://bucket/prefix``."""
    if url.startswith("file:"):
        from cache_server.storage.local import LocalBlobStore

        return LocalBlobStore.from_url(url)
    if url.startswith("gs://"):
        from cache_server.storage.gcs import GcsBlobStore

        return GcsBlobStore.from_url(url, timeout=timeout, retries=retries)
    raise ValueError(f"Unsupported storage URL {url!r}: use file:///path or gs://bucket/prefix.")
