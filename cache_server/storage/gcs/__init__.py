"""Google Cloud Storage blob store: ``gs://bucket/prefix``.

Layout: the blob ``<namespace>/<key>`` is the object ``<prefix>/<namespace>/<key>``. The metadata map given to
:meth:`GcsBlobStore.put` is the object's custom metadata; ``BlobInfo.created`` is the object's creation time
as GCS records it.

How the contract of :mod:`cache_server.storage.base` holds here:

* **Create-only.** Every upload carries ``ifGenerationMatch=0``: GCS refuses (412) to create an object that
  exists, atomically, so of concurrent puts one wins and the others drain their chunks and return False.
* **All or nothing.** A body of at most :data:`MULTIPART_LIMIT` bytes is sent in one request, only after the
  chunks iterator has finished. A larger body goes through a resumable upload session: full chunks as they
  fill, and the final chunk (the only one that makes the object exist) only after the iterator is exhausted.
  If anything raises first, the session is cancelled (DELETE) and the error re-raised; an unfinished session
  never becomes visible in any case.
* **Streaming.** An upload holds at most one chunk (``chunk_size``, 16 MiB by default) of pieces, never
  joined; a download is one streamed GET read :data:`READ_CHUNK` bytes at a time, resumed with a Range request
  if the connection drops, and pinned to the generation :meth:`~GcsBlobStore.open` saw. A bundle's small
  blobs are each read whole by one GET (:meth:`~GcsBlobStore.read_whole`: no metadata request first), at most
  ``read_ahead`` at once and ``read_ahead_bytes`` together.
* **Errors.** 404 is a miss. 408, 429, 5xx, dropped connections and timeouts are retried with exponential
  backoff, at most ``retries`` times per request; what still fails, and every other vendor error, becomes
  :class:`~cache_server.errors.StorageUnavailable` naming the bucket.

Credentials are Application Default Credentials. With ``STORAGE_EMULATOR_HOST`` set (the variable Google's
own libraries read) or an explicit ``endpoint``, requests go there, with anonymous credentials by default.

Signed URLs are signed locally by credentials with a key, else through the IAM Credentials API as the service
account the credentials act as (a VM's attached account, no key on disk).

The modules: ``store`` (the :class:`GcsBlobStore` operations), ``transport`` (the session, retries, timeouts
and errors every request goes through), ``upload`` (multipart and resumable uploads), ``reader`` (streamed,
resumable downloads), ``signing`` (signing through IAM).
"""

from __future__ import annotations

from cache_server.storage.base import READ_CHUNK
from cache_server.storage.gcs.store import MAX_SIGNED_URL_SECONDS, GcsBlobStore
from cache_server.storage.gcs.upload import DEFAULT_CHUNK_SIZE, MULTIPART_LIMIT

__all__ = ["DEFAULT_CHUNK_SIZE", "MAX_SIGNED_URL_SECONDS", "MULTIPART_LIMIT", "READ_CHUNK", "GcsBlobStore"]
