"""The local blob store's operations: put (create-only, or a replacing compare-and-swap), reads, stat,
delete, set aside, list, packs and the sweep of temp files. See :mod:`cache_server.storage.local`."""

from __future__ import annotations

import datetime as dt
import os
import stat as stat_mode
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from cache_server.errors import InvalidName, StorageUnavailable
from cache_server.names import check_key, check_namespace
from cache_server.storage.base import (
    PACK_DIR,
    BlobInfo,
    BlobReader,
    ReplaceJudge,
    blob_name,
    check_pack_id,
)
from cache_server.storage.local.batch import LocalBatch
from cache_server.storage.local.blob_files import TMP_DIR, BlobFiles
from cache_server.storage.local.files import (
    NotAFile,
    file_identity,
    fsync_dir,
    open_blob,
    storage_errors,
    unlink,
)
from cache_server.storage.local.header import HEADER_SIZE, MAGIC, info_of
from cache_server.storage.local.readers import HeldLocalBlob, LocalReader

__all__ = ["STALE_TEMP_SECONDS", "TMP_DIR", "LocalBlobStore"]

STALE_TEMP_SECONDS = 3600.0


def _is_valid(check: Callable[[str], str], value: str) -> bool:
    try:
        check(value)
    except InvalidName:
        return False
    return True


class LocalBlobStore:
    """Blobs in a local directory. Safe for concurrent use by threads and processes on one host.

    Also a :class:`~cache_server.storage.abilities.SweepsTempFiles`: a killed process leaves its temp file;
    and a :class:`~cache_server.storage.abilities.StoresPacks`, off by default (a local read costs no round
    trip).
    """

    packs_by_default = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files = BlobFiles(root)

    @classmethod
    def from_url(cls, url: str) -> LocalBlobStore:
        """Build from ``file:///abs/path`` (or ``file://relative/path``)."""
        parsed = urlparse(url)
        path = unquote(parsed.netloc + parsed.path)
        if not path:
            raise ValueError(f"Storage URL {url!r} names no directory.")
        return cls(Path(path))

    # -- writing ----------------------------------------------------------------------------------------
    def put(
        self,
        name: str,
        chunks: Iterable[bytes],
        metadata: Mapping[str, str],
        *,
        replace: ReplaceJudge | None = None,
    ) -> bool:
        final = self._files.file(name)
        if os.path.lexists(final) and not self._files.judged_replaceable(name, replace):
            for _ in chunks:  # let a checking iterator see every byte and raise if it must
                pass
            return False
        with storage_errors():
            tmp = self._files.write_temp(name, chunks, metadata, sync=True)
            try:
                created = self._files.claim(name, tmp, final, replace)
                if created:
                    fsync_dir(os.path.dirname(final))
                return created
            finally:
                unlink(tmp)

    def set_aside(self, name: str) -> bool:
        """Move a damaged blob into ``<root>/.damaged/<namespace>/<key>.<random>``; True if it was there."""
        return self._files.move_aside(name, self._files.file(name))

    def batch(self) -> LocalBatch:
        """A batch: temp files written without fsync, then one filesystem sync, links, and one fsync per
        directory at commit (see :class:`~cache_server.storage.abilities.PutsInBatches`)."""
        return LocalBatch(self._files)

    # -- packs (StoresPacks) ----------------------------------------------------------------------------
    def _pack_path(self, pack_id: str) -> Path:
        return self.root / PACK_DIR / check_pack_id(pack_id)

    def put_pack(self, pack_id: str, pieces: Sequence[bytes]) -> None:
        final = self._pack_path(pack_id)
        with storage_errors():
            tmp = self._files.temp_file()
            try:
                with open(tmp, "wb") as handle:
                    for piece in pieces:
                        handle.write(piece)
                    handle.flush()
                    os.fsync(handle.fileno())
                if not self._files.link(tmp, str(final)):
                    raise ValueError(f"The pack {pack_id} exists already.")
                fsync_dir(final.parent)
            finally:
                unlink(tmp)

    def read_pack(self, pack_id: str, start: int, length: int) -> bytes | None:
        try:
            with open(self._pack_path(pack_id), "rb") as handle:
                handle.seek(start)
                return handle.read(length)
        except FileNotFoundError:
            return None

    def delete_pack(self, pack_id: str) -> bool:
        return unlink(self._pack_path(pack_id))

    def list_packs(self) -> Iterator[BlobInfo]:
        directory = self.root / PACK_DIR
        if not directory.is_dir():
            return
        for path in directory.iterdir():
            try:
                check_pack_id(path.name)
                stat = path.stat()
            except (InvalidName, FileNotFoundError):
                continue
            created = dt.datetime.fromtimestamp(stat.st_mtime, dt.timezone.utc)
            yield BlobInfo(name=path.name, size=stat.st_size, created=created)

    # -- reading ----------------------------------------------------------------------------------------

    def read_whole(self, name: str, limit: int) -> BlobReader | None:
        """One ``pread`` of the whole file, of exactly its size (see
        :class:`~cache_server.storage.abilities.ReadsWhole`): no buffered reads, no 8 MiB read buffer per
        blob, which a bundle of small blobs paid thousands of times. A blob over ``limit`` is opened instead.
        The header is parsed only if the reader's ``info`` is asked for (a bundle never does)."""
        try:
            fd = open_blob(self._files.file(name))
        except NotAFile:
            return None
        if fd is None:
            return None
        try:
            stat = os.fstat(fd)
            if not stat_mode.S_ISREG(stat.st_mode):
                return None  # a directory where a blob should be: damaged, read as a miss
            if stat.st_size - HEADER_SIZE > limit:
                return self.open(name)
            raw = os.pread(fd, stat.st_size, 0)
        finally:
            os.close(fd)
        if len(raw) < HEADER_SIZE or not raw.startswith(MAGIC):
            return None
        return HeldLocalBlob(name, raw, file_identity(stat))

    def open(self, name: str) -> LocalReader | None:
        """The blob opened for reading; None on a miss, and for a damaged blob (see ``stat``)."""
        try:
            fd = open_blob(self._files.file(name))
        except NotAFile:
            return None
        if fd is None:
            return None
        try:
            info = info_of(name, fd, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        if info.damaged is not None:
            os.close(fd)
            return None
        return LocalReader(os.fdopen(fd, "rb"), info)

    def stat(self, name: str) -> BlobInfo | None:
        """The blob's info; for a damaged one (a header that cannot be read, something other than a file)
        with ``damaged`` saying why."""
        return self._files.stat(name)

    def delete(self, name: str) -> bool:
        path = self._files.file(name)
        try:
            return unlink(path)
        except IsADirectoryError:  # not a blob (damaged): moved aside, never removed with what it holds
            return self._files.move_aside(name, path)

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        if not self.root.exists():
            return
        for ns_dir in sorted(self.root.iterdir()):
            # Skip what is not ours: the root may be a mount point (lost+found) or shared over NFS (.nfs*).
            if ns_dir.name == TMP_DIR or not ns_dir.is_dir() or not _is_valid(check_namespace, ns_dir.name):
                continue
            for path in ns_dir.iterdir():
                if not _is_valid(check_key, path.name) or not path.is_file():
                    continue
                name = blob_name(ns_dir.name, path.name)
                if not name.startswith(prefix):
                    continue
                info = self.stat(name)
                if info is not None:
                    yield info

    def check(self) -> None:
        if not os.access(self.root, os.W_OK) or not self._files.tmp.is_dir():
            raise StorageUnavailable(f"The local blob directory {self.root} is missing or not writable.")

    def close(self) -> None:
        return None

    def remove_stale_temp_files(self, older_than_seconds: float = STALE_TEMP_SECONDS) -> int:
        """Delete the temp files of dead uploads; see
        :class:`~cache_server.storage.abilities.SweepsTempFiles`.

        A put removes its own temp file whatever happens, so only a process that was killed leaves one.
        """
        removed = 0
        now = dt.datetime.now().timestamp()
        for path in self._files.tmp.glob("*.part"):
            try:
                if now - path.stat().st_mtime > older_than_seconds:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        return removed
