"""Rebuild a lost index from the blob store.

Every blob carries what its index row needs in its metadata (a
:class:`~cache_server.service.metadata.BlobMetadata`, written by the one entry writer together with the
bytes): ``namespace``, ``key``, ``sha256``, ``created``, and optionally ``compile_time_ms``, ``uploader`` and
``stored_by``. The store knows each blob's size. So after the database is lost (or restored from an old
backup) :meth:`Reindexer.run` lists the store and adds every row the index lacks. Rows already there win:
reindexing a healthy index changes nothing, and it is safe while servers keep answering. A damaged blob (its
header or metadata unreadable) is left out with one log line and counted (``damaged``); reindex never changes
the store (gc sets such blobs aside).

What cannot come back: namespace fingerprints and labels (each client registers its namespace again when
it warms), hit counters and access times (entries start cold, in creation order).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from cache_server.errors import CacheError
from cache_server.index.entries import EntryRecord, EntryRepository
from cache_server.names import check_sha256
from cache_server.service.metadata import BlobMetadata
from cache_server.storage.base import BlobInfo, BlobStore

__all__ = ["ReindexReport", "Reindexer", "record_of"]

log = logging.getLogger(__name__)
BATCH = 500


@dataclass
class ReindexReport:
    """What a reindex found and did."""

    blobs: int = 0
    added: int = 0
    already_indexed: int = 0
    bytes: int = 0
    namespaces: set[str] = field(default_factory=set)
    skipped: dict[str, str] = field(default_factory=dict)  # blob name -> why it was left out
    damaged: int = 0  # of the skipped: blobs whose header or metadata the store could not read

    def summary(self) -> str:
        """One line for people."""
        return (
            f"{self.blobs} blobs in {len(self.namespaces)} namespaces ({self.bytes} bytes): "
            f"{self.added} rows added, {self.already_indexed} already indexed, {len(self.skipped)} skipped "
            f"({self.damaged} damaged)"
        )


def _digest_of(store: BlobStore, name: str) -> str | None:
    reader = store.open(name)
    if reader is None:
        return None
    digest = hashlib.sha256()
    with reader:
        for chunk in reader.chunks():
            digest.update(chunk)
    return digest.hexdigest()


def record_of(info: BlobInfo, store: BlobStore, *, verify: bool) -> EntryRecord:
    """The index row a blob stands for (its :class:`BlobMetadata`, as the writer wrote it); raises
    CacheError or ValueError when it cannot be trusted."""
    meta = BlobMetadata.of(info)
    sha256 = meta.sha256
    if verify:
        actual = _digest_of(store, info.name)
        if actual is None:
            raise ValueError("it vanished while being read")
        if sha256 and sha256 != actual:
            raise ValueError(f"its bytes hash to {actual}, not {sha256} as its metadata says")
        sha256 = actual
    elif not sha256:
        raise ValueError("its metadata has no sha256 (reindex --verify hashes the bytes instead)")
    return replace(meta, sha256=check_sha256(sha256)).record(info.size)


class Reindexer:
    """Rebuilds the rows of the index's :class:`EntryRepository` from one blob store."""

    def __init__(self, entries: EntryRepository, store: BlobStore) -> None:
        self._entries = entries
        self._store = store

    def run(
        self,
        *,
        verify: bool = False,
        dry_run: bool = False,
        progress: Callable[[ReindexReport], None] | None = None,
    ) -> ReindexReport:
        """Add an index row for every blob that lacks one. See the module docstring.

        ``verify`` hashes every blob's bytes (slow: it reads the whole store) and leaves out those that do
        not match their recorded digest; ``dry_run`` counts what would be added without writing.
        """
        report = ReindexReport()
        batch: list[EntryRecord] = []

        def flush() -> None:
            if not batch:
                return
            if dry_run:
                added = 0
                for namespace in {r.namespace for r in batch}:
                    keys = [r.key for r in batch if r.namespace == namespace]
                    added += len(self._entries.missing_keys(namespace, keys))
            else:
                added = self._entries.add_missing_entries(batch)
            report.added += added
            report.already_indexed += len(batch) - added
            batch.clear()
            if progress is not None:
                progress(report)

        for info in self._store.list():
            report.blobs += 1
            if info.damaged is not None:  # never fatal: reported, left in place (gc sets it aside)
                log.warning("reindex: leaving out damaged blob %s: %s", info.name, info.damaged)
                report.skipped[info.name] = f"damaged: {info.damaged}"
                report.damaged += 1
                continue
            try:
                record = record_of(info, self._store, verify=verify)
            except (CacheError, ValueError) as exc:
                reason = exc.detail if isinstance(exc, CacheError) else str(exc)
                log.warning("reindex: leaving out %s: %s", info.name, reason)
                report.skipped[info.name] = reason
                continue
            report.namespaces.add(record.namespace)
            report.bytes += record.size
            batch.append(record)
            if len(batch) >= BATCH:
                flush()
        flush()
        return report
