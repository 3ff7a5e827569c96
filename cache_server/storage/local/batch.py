"""The local store's batch: many puts made durable by one filesystem sync."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from cache_server.storage.base import ReplaceJudge
from cache_server.storage.local.files import fsync_dir, storage_errors, sync_filesystem, unlink

if TYPE_CHECKING:
    from cache_server.storage.local.blob_files import BlobFiles

__all__ = ["LocalBatch"]


class LocalBatch:
    """Puts into a local store, through its :class:`~cache_server.storage.local.blob_files.BlobFiles`,
    whose durability is paid once per commit.

    A put writes its temp file without fsync. Commit syncs the filesystem once, links each temp file to its
    final name (create-only, as ``put``), fsyncs each directory that got a name once, and removes the temp
    files. A crash before the sync leaves only temp files (swept later); after it, every name that exists
    has its whole bytes.
    """

    def __init__(self, files: BlobFiles) -> None:
        self._files = files
        self._pending: dict[str, str] = {}
        self._present: set[str] = set()
        self._replace: dict[str, ReplaceJudge] = {}

    def put(
        self,
        name: str,
        chunks: Iterable[bytes],
        metadata: Mapping[str, str],
        *,
        replace: ReplaceJudge | None = None,
    ) -> None:
        if (
            name in self._pending
            or name in self._present
            or (os.path.lexists(self._files.file(name)) and not self._files.judged_replaceable(name, replace))
        ):
            for _ in chunks:
                pass
            if name not in self._pending:
                self._present.add(name)
            return
        with storage_errors():
            self._pending[name] = self._files.write_temp(name, chunks, metadata, sync=False)
        if replace is not None:
            self._replace[name] = replace

    def commit(self) -> dict[str, bool]:
        pending, present, replace = self._pending, self._present, self._replace
        self._pending, self._present, self._replace = {}, set(), {}
        done = dict.fromkeys(present, False)
        try:
            with storage_errors():
                if pending:
                    sync_filesystem(self._files.tmp, list(pending.values()))
                directories: set[str] = set()
                for name, tmp in pending.items():
                    final = self._files.file(name)
                    done[name] = self._files.claim(name, tmp, final, replace.get(name))
                    if done[name]:
                        directories.add(os.path.dirname(final))
                for directory in directories:
                    fsync_dir(directory)
        finally:
            for tmp in pending.values():
                unlink(tmp)
        return done

    def abort(self) -> None:
        for tmp in self._pending.values():
            unlink(tmp)
        self._pending, self._present, self._replace = {}, set(), {}

    def __enter__(self) -> LocalBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()
