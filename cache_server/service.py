"""The domain: put, get, manifest, bundle, namespaces. No HTTP here.

Consistency rules (DESIGN.md): the blob is written before its index row, and removed after it; a reader
only gets bytes whose SHA-256 matches the index (checked while streaming: a mismatch breaks the stream).
"""

from __future__ import annotations

import hashlib
import logging
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cache_server.access import AccessRecorder
from cache_server.errors import (
    DigestConflict,
    DigestMismatch,
    EntryNotFound,
    EntryTooLarge,
    NamespaceNotFound,
    StorageUnavailable,
    TooManyKeys,
)
from cache_server.index.models import Entry, utcnow
from cache_server.index.repository import IndexRepository, NamespaceSummary
from cache_server.names import check_key, check_namespace
from cache_server.settings import Settings
from cache_server.storage.base import BlobReader, BlobStore, blob_name

__all__ = ["CacheService", "CorruptBlob", "OpenedEntry", "PutResult"]

log = logging.getLogger(__name__)
TAR_BLOCK = 512
BUNDLE_PIECE = 1024 * 1024


class CorruptBlob(RuntimeError):
    """A stored blob's bytes do not match the index; raised mid-stream so the response breaks."""


@dataclass(frozen=True)
class PutResult:
    """Outcome of an upload: ``created`` is False when the same bytes were already stored."""

    created: bool
    namespace: str
    key: str
    size: int
    sha256: str


@dataclass
class OpenedEntry:
    """An entry ready to stream: its index row and a verifying byte iterator."""

    entry: Entry
    body: Iterator[bytes]


def _checked_upload(chunks: Iterable[bytes], sha256: str, limit: int) -> Iterator[bytes]:
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise EntryTooLarge(f"The entry is larger than the limit of {limit} bytes; nothing was stored.")
        digest.update(chunk)
        yield chunk
    if digest.hexdigest() != sha256:
        raise DigestMismatch(
            f"The body's SHA-256 is {digest.hexdigest()}, not {sha256} as X-Content-SHA256 says; "
            "nothing was stored."
        )


def _coalesce(pieces: Iterator[bytes], size: int = BUNDLE_PIECE) -> Iterator[bytes]:
    """Join small pieces (tar headers, small entries, padding) so the response sends fewer, larger writes."""
    buffer = bytearray()
    for piece in pieces:
        buffer += piece
        if len(buffer) >= size:
            yield bytes(buffer)
            buffer.clear()
    if buffer:
        yield bytes(buffer)


class CacheService:
    """Entries and namespaces over one index and one blob store."""

    def __init__(self, settings: Settings, repository: IndexRepository, store: BlobStore) -> None:
        self.settings = settings
        self.repository = repository
        self.store = store
        self.access = AccessRecorder(repository, settings.access_flush_seconds)
        # Called with (namespace, key) after a new entry is stored; must be quick and must not raise
        # (the admin side queues the entry for parsing).
        self.stored_listeners: list[Callable[[str, str], None]] = []

    def start(self) -> None:
        self.access.start()

    def stop(self) -> None:
        self.access.stop()
        self.store.close()
        self.repository.engine.dispose()

    # -- health -----------------------------------------------------------------------------------------
    def check_ready(self) -> None:
        """Raise IndexUnavailable or StorageUnavailable unless both are reachable."""
        self.repository.ping()
        self.store.check()

    # -- namespaces -------------------------------------------------------------------------------------
    def register_namespace(
        self, namespace: str, fingerprint: Mapping[str, Any], labels: Mapping[str, str]
    ) -> tuple[NamespaceSummary, bool]:
        return self.repository.upsert_namespace(check_namespace(namespace), fingerprint, labels)

    def get_namespace(self, namespace: str) -> NamespaceSummary:
        summary = self.repository.get_namespace(check_namespace(namespace))
        if summary is None:
            raise NamespaceNotFound(f"The namespace {namespace!r} has never been registered.")
        return summary

    # -- entries ----------------------------------------------------------------------------------------
    def check_upload_size(self, declared: int | None) -> None:
        """Refuse at once an upload whose declared length is over the limit."""
        limit = self.settings.max_entry_bytes
        if declared is not None and declared > limit:
            raise EntryTooLarge(
                f"The entry is {declared} bytes; the limit is {limit} bytes (XLA_CACHE_MAX_ENTRY_BYTES)."
            )

    def put_entry(
        self,
        namespace: str,
        key: str,
        chunks: Iterable[bytes],
        *,
        sha256: str,
        declared_size: int | None = None,
        compile_time_ms: int | None = None,
        uploader: str | None = None,
    ) -> PutResult:
        """Store an entry: blob first (create-only), then its row. See DESIGN.md for the status rules."""
        check_namespace(namespace)
        check_key(key)
        self.check_upload_size(declared_size)
        existing = self.repository.get_entry(namespace, key)
        if existing is not None and existing.sha256 != sha256:
            raise self._conflict(namespace, key, existing.sha256)
        created_at = utcnow()
        metadata = {
            "namespace": namespace,
            "key": key,
            "sha256": sha256,
            "created": created_at.isoformat(),
        }
        if compile_time_ms is not None:
            metadata["compile_time_ms"] = str(compile_time_ms)
        if uploader:
            metadata["uploader"] = uploader[:256]
        checked = _checked_upload(chunks, sha256, self.settings.max_entry_bytes)
        name = blob_name(namespace, key)
        created = self.store.put(name, checked, metadata)
        info = self.store.stat(name)
        if info is None:
            raise StorageUnavailable("The blob store lost an entry right after writing it; please retry.")
        stored_sha = info.metadata.get("sha256", "")
        if not created and stored_sha != sha256:
            raise self._conflict(namespace, key, stored_sha)
        self.repository.record_entry(
            namespace=namespace,
            key=key,
            size=info.size,
            sha256=stored_sha,
            created_at=info.created if not created else created_at,
            compile_time_ms=compile_time_ms,
            uploader=uploader[:256] if uploader else None,
            replace=created,
        )
        if created:
            for listener in self.stored_listeners:
                listener(namespace, key)
        return PutResult(created=created, namespace=namespace, key=key, size=info.size, sha256=stored_sha)

    @staticmethod
    def _conflict(namespace: str, key: str, stored: str) -> DigestConflict:
        return DigestConflict(
            f"The key {key!r} in namespace {namespace!r} is already stored with SHA-256 {stored}; "
            "entries are immutable and the first upload stays."
        )

    def head_entry(self, namespace: str, key: str) -> Entry:
        """The entry's row, without counting a hit."""
        entry = self.repository.get_entry(check_namespace(namespace), check_key(key))
        if entry is None:
            raise EntryNotFound(f"No entry {key!r} in namespace {namespace!r}.")
        return entry

    def open_entry(self, namespace: str, key: str) -> OpenedEntry:
        """Open an entry for streaming; counts a hit, or a miss when absent."""
        check_namespace(namespace)
        check_key(key)
        entry = self.repository.get_entry(namespace, key)
        reader = self.store.open(blob_name(namespace, key)) if entry is not None else None
        if entry is None or reader is None:
            self.access.miss(namespace)
            if entry is not None:
                log.warning("index row without blob: %s/%s (gc will drop it)", namespace, key)
            raise EntryNotFound(f"No entry {key!r} in namespace {namespace!r}.")
        self.access.hit(namespace, key, entry.size)
        return OpenedEntry(entry=entry, body=self._verified(entry, reader))

    def _verified(self, entry: Entry, reader: BlobReader) -> Iterator[bytes]:
        """Stream the blob, holding back its last chunk until the whole digest has been checked.

        A blob whose bytes no longer match the index therefore never reaches a reader complete: the
        stream stops short of its Content-Length and the client sees a broken transfer.
        """
        digest = hashlib.sha256()
        size = 0
        held: bytes | None = None
        try:
            for chunk in reader.chunks():
                size += len(chunk)
                if size > entry.size:
                    break
                digest.update(chunk)
                if held is not None:
                    yield held
                held = chunk
        finally:
            reader.close()
        if size != entry.size or digest.hexdigest() != entry.sha256:
            log.error("corrupt blob %s/%s: stored bytes do not match the index", entry.namespace, entry.key)
            raise CorruptBlob(f"stored bytes of {entry.namespace}/{entry.key} do not match the index")
        if held is not None:
            yield held

    def delete_entry(self, namespace: str, key: str) -> None:
        """Remove an entry: index row first, then the blob."""
        check_namespace(namespace)
        check_key(key)
        if self.repository.delete_entry(namespace, key) is None:
            raise EntryNotFound(f"No entry {key!r} in namespace {namespace!r}.")
        self.store.delete(blob_name(namespace, key))

    def _check_keys(self, keys: Sequence[str]) -> list[str]:
        limit = self.settings.max_keys_per_request
        if len(keys) > limit:
            raise TooManyKeys(
                f"The request names {len(keys)} keys; at most {limit} are allowed in one request."
            )
        return [check_key(key) for key in keys]

    def missing(self, namespace: str, keys: Sequence[str]) -> list[str]:
        """Which of ``keys`` the namespace lacks."""
        check_namespace(namespace)
        return self.repository.missing_keys(namespace, self._check_keys(keys))

    def manifest(
        self, namespace: str, *, max_bytes: int | None = None, max_entries: int | None = None
    ) -> list[Entry]:
        """The entries worth warming, most useful first, within the bounds."""
        return self.repository.manifest(
            check_namespace(namespace), max_bytes=max_bytes, max_entries=max_entries
        )

    def bundle(self, namespace: str, keys: Sequence[str]) -> Iterator[bytes]:
        """A tar stream of the stored entries among ``keys`` (member name = key); absent keys are left out.

        Checks run before the first byte; each member's bytes are verified while they stream.
        """
        check_namespace(namespace)
        wanted = list(dict.fromkeys(self._check_keys(keys)))
        rows = self.repository.get_entries(namespace, wanted)
        missing = len(wanted) - len(rows)
        if missing:
            self.access.miss(namespace, missing)
        return _coalesce(self._tar_stream(namespace, [rows[key] for key in wanted if key in rows]))

    def _tar_stream(self, namespace: str, entries: list[Entry]) -> Iterator[bytes]:
        for entry in entries:
            reader = self.store.open(blob_name(namespace, entry.key))
            if reader is None:
                log.warning("index row without blob: %s/%s (left out of the bundle)", namespace, entry.key)
                continue
            self.access.hit(namespace, entry.key, entry.size)
            info = tarfile.TarInfo(entry.key)
            info.size = entry.size
            info.mtime = int(entry.created_at.timestamp())
            info.mode = 0o644
            info.pax_headers = {"XLA_CACHE.sha256": entry.sha256}
            yield info.tobuf(format=tarfile.PAX_FORMAT)
            yield from self._verified(entry, reader)
            padding = -entry.size % TAR_BLOCK
            if padding:
                yield b"\0" * padding
        yield b"\0" * (2 * TAR_BLOCK)
