"""Blob stores: the protocol and its backends. :func:`open_store` picks one from a URL.

Adding a backend (S3, Azure, ...): one package beside ``local/`` and ``gcs/``, built by
:func:`open_store` from its URL scheme.

* **Required**, :class:`~cache_server.storage.base.BlobStore`: ``put`` (create-only, or replacing what a
  ``replace`` judge picks, as a compare-and-swap), ``open``, ``stat``, ``delete``, ``set_aside``, ``list``,
  ``check`` and ``close``; ``open`` gives a :class:`~cache_server.storage.base.BlobReader`: ``info``,
  ``chunks``, ``close`` and ``identity`` (``None`` unless the backend can name the very stored bytes, as a
  local file's inode and times do: then a blob the server has hashed once is streamed unhashed). Names
  are checked with :func:`~cache_server.storage.base.parse_blob_name` before a path or an object name is
  built from them; vendor errors become :class:`~cache_server.errors.StorageUnavailable` at the backend's
  edge; a damaged blob is reported in ``BlobInfo.damaged``, never raised. The module docstring of
  :mod:`cache_server.storage.base` is the contract.
* **Optional** abilities, each a protocol in :mod:`cache_server.storage.abilities`, all listed in its
  ``ABILITIES``; implement one and the server uses it (callers ask ``isinstance``):

  - ``SignsUrls`` (``signed_url``, ``signed_urls``): clients download straight from the store, with
    ``XLA_CACHE_SIGNED_URL_SECONDS`` > 0.
  - ``SweepsTempFiles`` (``remove_stale_temp_files``): gc deletes the temp files of uploads that died.
  - ``PutsInBatches`` (``batch``, a ``BlobBatch``): a bulk upload makes its blobs durable together (else
    one put each; :class:`~cache_server.storage.batches.ConcurrentBatch` overlaps a remote store's puts).
  - ``ReadsWhole`` (``read_whole``): a small blob in one round trip, not an open and a read (a
    :class:`~cache_server.storage.reading.HeldReader` holds its bytes).
  - ``ReadsAhead`` (``read_ahead``, ``read_ahead_bytes``): bundles and packing overlap the reads of small
    blobs (for a remote store; else one at a time).
  - ``StoresPacks`` (``put_pack``, ``read_pack``, ``delete_pack``, ``list_packs``, ``packs_by_default``):
    bundles read many small blobs from one pack by byte range; gc deletes packs nothing points into.

* **Tested** by adding the backend to the ``backend`` fixture of ``tests/storage/conftest.py`` with the
  abilities it has: ``tests/storage/test_contract.py`` then runs the contract on it unchanged, and the check
  of each of those abilities.
"""

from __future__ import annotations

from cache_server.storage.abilities import SignsUrls, SweepsTempFiles
from cache_server.storage.base import BlobInfo, BlobReader, BlobStore, blob_name, split_blob_name

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
