"""The local blob store's operations: put (create-only, or a replacing compare-and-swap), reads, stat,
delete, set aside, list, packs and the sweep of temp files. See :mod:`cache_server.storage.local`."""

from __future__ import annotations

import datetime as dt
import fcntl
import itertools
import os
import stat as stat_mode
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from cache_server.errors import InvalidName, StorageUnavailable
from cache_server.names import check_key, check_namespace
from cache_server.storage.base import (
    DAMAGED_DIR,
    PACK_DIR,
    BlobInfo,
    BlobReader,
    ReplaceJudge,
    blob_name,
    check_pack_id,
    parse_blob_name,
)
from cache_server.storage.local.batch import LocalBatch
from cache_server.storage.local.files import (
    NotAFile,
    file_identity,
    fsync_dir,
    open_blob,
    pwrite_all,
    storage_errors,
    unlink,
)
from cache_server.storage.local.header import HEADER_SIZE, MAGIC, damaged_info, encode_header, info_of
from cache_server.storage.local.readers import HeldLocalBlob, LocalReader

__all__ = ["STALE_TEMP_SECONDS", "TMP_DIR", "LocalBlobStore"]

TMP_DIR = ".tmp"
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
        self._root = str(root)
        self._tmp = root / TMP_DIR
        self._tmp.mkdir(parents=True, exist_ok=True)
        self._tmp_dir = str(self._tmp)
        # temp file names: pid, a random tag and a count (unique across threads, processes and forks)
        self._tag = uuid.uuid4().hex[:8]
        self._numbers = itertools.count()

    @classmethod
    def from_url(cls, url: str) -> LocalBlobStore:
        """Build from ``file:///abs/path`` (or ``file://relative/path``)."""
        parsed = urlparse(url)
        path = unquote(parsed.netloc + parsed.path)
        if not path:
            raise ValueError(f"Storage URL {url!r} names no directory.")
        return cls(Path(path))

    def _path(self, name: str) -> Path:
        return Path(self._file(name))

    def _file(self, name: str) -> str:
        """The path of blob ``name``, as a string (pathlib's joins were a tenth of a small blob's cost)."""
        namespace, key = parse_blob_name(name)
        return os.path.join(self._root, namespace, key)

    # -- writing ----------------------------------------------------------------------------------------
    def put(
        self,
        name: str,
        chunks: Iterable[bytes],
        metadata: Mapping[str, str],
        *,
        replace: ReplaceJudge | None = None,
    ) -> bool:
        final = self._file(name)
        if os.path.lexists(final) and not self._judged_replaceable(name, replace):
            for _ in chunks:  # let a checking iterator see every byte and raise if it must
                pass
            return False
        with storage_errors():
            tmp = self._write_temp(name, chunks, metadata, sync=True)
            try:
                created = self._claim(name, tmp, final, replace)
                if created:
                    fsync_dir(os.path.dirname(final))
                return created
            finally:
                unlink(tmp)

    def _judged_replaceable(self, name: str, replace: ReplaceJudge | None) -> bool:
        """Whether a put should write its bytes although the name is taken: ``replace`` wants the blob
        there now replaced (judged again, under a lock, before the swap), or it is gone meanwhile."""
        if replace is None:
            return False
        info = self.stat(name)
        return info is None or replace(info)

    def _claim(self, name: str, tmp: str, final: str, replace: ReplaceJudge | None) -> bool:
        """Give a durable temp file the name ``final``: created if free, else swapped in for the blob there
        if ``replace`` still judges it replaceable under an exclusive lock on it (see the module docstring).
        The directory is not fsynced here."""
        if self._link(tmp, final):
            return True
        if replace is None:
            return False
        try:
            fd = open_blob(final)
        except NotAFile as exc:  # a symbolic link or a socket: nothing to lock; a create-only link decides
            if not replace(damaged_info(name, exc.reason, None)):
                return False
            self._move_aside(name, final)
            return self._link(tmp, final)
        if fd is None:  # removed meanwhile: the name is free again
            return self._link(tmp, final)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                now = os.stat(final)
            except FileNotFoundError:
                return self._link(tmp, final)
            if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                return False  # another replacer swapped it first: its blob is not the one judged
            if not replace(info_of(name, fd, held)):
                return False
            if stat_mode.S_ISREG(held.st_mode):
                os.rename(tmp, final)
                return True
            self._move_aside(name, final)  # a directory (or another non-file) cannot be renamed over
            return self._link(tmp, final)
        finally:
            os.close(fd)

    def set_aside(self, name: str) -> bool:
        """Move a damaged blob into ``<root>/.damaged/<namespace>/<key>.<random>``; True if it was there."""
        return self._move_aside(name, self._file(name))

    def _move_aside(self, name: str, path: str) -> bool:
        namespace, key = parse_blob_name(name)
        aside = os.path.join(self._root, DAMAGED_DIR, namespace)
        os.makedirs(aside, exist_ok=True)
        try:
            os.rename(path, os.path.join(aside, f"{key}.{uuid.uuid4().hex[:8]}"))
        except FileNotFoundError:
            return False
        return True

    def _temp_file(self) -> str:
        return os.path.join(self._tmp_dir, f"{os.getpid():x}-{self._tag}-{next(self._numbers):x}.part")

    def _write_temp(
        self, name: str, chunks: Iterable[bytes], metadata: Mapping[str, str], *, sync: bool
    ) -> str:
        """The blob, header and bytes, in a new temp file (fsynced if ``sync``); removed if chunks raise.
        The bytes are written after the header's place, then the header (which holds their size)."""
        tmp = self._temp_file()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # less the umask, as open() was
        try:
            try:
                size = 0
                for chunk in chunks:
                    pwrite_all(fd, chunk, HEADER_SIZE + size)
                    size += len(chunk)
                header = {
                    "name": name,
                    "size": size,
                    "created": dt.datetime.now(dt.timezone.utc).isoformat(),
                    "metadata": dict(metadata),
                }
                pwrite_all(fd, encode_header(header), 0)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            unlink(tmp)
            raise
        return tmp

    def _link(self, tmp: str, final: str) -> bool:
        """Give a durable temp file its final name, if that is free (the directory is not fsynced here)."""
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        except FileNotFoundError:  # the namespace's first blob: its directory must survive a crash too
            os.makedirs(os.path.dirname(final), exist_ok=True)
            fsync_dir(self._root)
            try:
                os.link(tmp, final)
            except FileExistsError:
                return False
        return True

    def batch(self) -> LocalBatch:
        """A batch: temp files written without fsync, then one filesystem sync, links, and one fsync per
        directory at commit (see :class:`~cache_server.storage.abilities.PutsInBatches`)."""
        return LocalBatch(self)

    # -- packs (StoresPacks) ----------------------------------------------------------------------------
    def _pack_path(self, pack_id: str) -> Path:
        return self.root / PACK_DIR / check_pack_id(pack_id)

    def put_pack(self, pack_id: str, pieces: Sequence[bytes]) -> None:
        final = self._pack_path(pack_id)
        with storage_errors():
            tmp = self._temp_file()
            try:
                with open(tmp, "wb") as handle:
                    for piece in pieces:
                        handle.write(piece)
                    handle.flush()
                    os.fsync(handle.fileno())
                if not self._link(tmp, str(final)):
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
            fd = open_blob(self._file(name))
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
            fd = open_blob(self._file(name))
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
        path = self._file(name)
        try:
            fd = open_blob(path)
        except NotAFile as exc:
            return damaged_info(name, exc.reason, None)
        if fd is None:
            return None
        try:
            return info_of(name, fd, os.fstat(fd))
        finally:
            os.close(fd)

    def delete(self, name: str) -> bool:
        path = self._file(name)
        try:
            return unlink(path)
        except IsADirectoryError:  # not a blob (damaged): moved aside, never removed with what it holds
            return self._move_aside(name, path)

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
        if not os.access(self.root, os.W_OK) or not self._tmp.is_dir():
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
        for path in self._tmp.glob("*.part"):
            try:
                if now - path.stat().st_mtime > older_than_seconds:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        return removed
