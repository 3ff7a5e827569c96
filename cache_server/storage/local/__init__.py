"""Local-directory blob store: the embedded default.

Layout: ``<root>/<namespace>/<key>`` for blobs, ``<root>/.tmp/`` for uploads in progress, ``<root>/.packs/``
for packs (plain files, written as blobs are: temp file, fsync, link), ``<root>/.damaged/`` for damaged
blobs set aside (``<namespace>/<key>.<random>``, kept for inspection). Each blob file
starts with a fixed-size header (magic line, then JSON metadata padded with spaces to
:data:`HEADER_SIZE` bytes) followed by the raw bytes, so metadata and bytes appear together atomically.

A put writes a private temp file, fsyncs it, then ``os.link``s it to its final name: link fails if the
name exists, which makes create-only atomic across threads and processes; the directory is fsynced so the
new name survives a crash. A batch (:class:`LocalBatch`) pays that once for many blobs. Names are validated
before any path is built. A replacing put (``replace=``) judges the stored file while holding an exclusive
``flock`` on it and renames its temp file over the name only if the name still points at that file (a
directory in the way is moved aside first): of several replacers one wins.

The modules: ``store`` (the :class:`LocalBlobStore` operations), ``batch`` (:class:`LocalBatch`),
``blob_files`` (the files both work through: a blob's path, temp files, the link or locked swap that names
one, what is at a name, the damaged folder; as the GCS store's parts share its transport), ``header``
(the blob file format: the header written and parsed, damage detected), ``readers`` (a blob streamed, or
read whole), ``files`` (file-system helpers: fsync, syncfs, unlink, opening a blob's file safely).
"""

from __future__ import annotations

from cache_server.storage.local.batch import LocalBatch
from cache_server.storage.local.header import HEADER_SIZE, MAGIC
from cache_server.storage.local.store import LocalBlobStore

__all__ = ["HEADER_SIZE", "MAGIC", "LocalBatch", "LocalBlobStore"]
