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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime as dt
import errno
import fcntl
import itertools
import json
import os
import stat as stat_mode
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import BinaryIO
from urllib.parse import unquote, urlparse

from cache_server.errors import InvalidName, StorageUnavailable
from cache_server.names import check_key, check_namespace
from cache_server.storage.base import (
    DAMAGED_DIR,
    PACK_DIR,
    READ_CHUNK,
    BlobInfo,
    BlobReader,
    ReplaceJudge,
    blob_name,
    check_pack_id,
    parse_blob_name,
)

__all__ = ["HEADER_SIZE", "LocalBatch", "LocalBlobStore"]

MAGIC = b"XLACACHE1\n"
HEADER_SIZE = 4096
LOCAL_READ_CHUNK = 8 * READ_CHUNK
"""A local file is read in pieces of 8 MiB: each piece of a download is one hop to a worker thread, and
fewer, larger pieces make a large download much faster than pieces of :data:`READ_CHUNK` would."""
TMP_DIR = ".tmp"
STALE_TEMP_SECONDS = 3600.0
_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME, use_errno=True) if _LIBC_NAME else None


def _is_valid(check: Callable[[str], str], value: str) -> bool:
    try:
        check(value)
    except InvalidName:
        return False
    return True


def _fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _identity(stat: os.stat_result) -> tuple[int, ...]:
    """A file as it is now: device, inode, size and change times (any write or replacement changes it)."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class _LocalReader:
    """An open local blob. ``identity`` (:attr:`~cache_server.storage.base.BlobReader.identity`) names this
    very file as it is now (device, inode, size, times): the service trusts a blob it has hashed whole until
    its identity changes."""

    def __init__(self, handle: BinaryIO, info: BlobInfo) -> None:
        self._handle = handle
        self.info = info
        self.identity = _identity(os.fstat(handle.fileno()))

    def chunks(self) -> Iterator[bytes]:
        self._handle.seek(HEADER_SIZE)
        while chunk := self._handle.read(LOCAL_READ_CHUNK):
            yield chunk

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> _LocalReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _HeldLocalBlob:
    """A small local blob read whole; ``identity`` as for :class:`_LocalReader`. Its header is parsed only
    when ``info`` is asked for (a bundle never does: the index knows the size, and the JSON cost a tenth of
    serving a small blob)."""

    def __init__(self, name: str, raw: bytes, identity: tuple[int, ...]) -> None:
        self._name = name
        self._header = raw[:HEADER_SIZE]
        self._data = raw[HEADER_SIZE:]
        self._size = len(self._data)
        self._info: BlobInfo | None = None
        self.identity = identity

    @property
    def info(self) -> BlobInfo:
        if self._info is None:
            info = _parse_header(self._name, self._header, HEADER_SIZE + self._size)
            self._info = BlobInfo(self._name, self._size, info.created, info.metadata, info.damaged)
        return self._info

    def chunks(self) -> Iterator[bytes]:
        if self._data:
            yield self._data

    def close(self) -> None:
        self._data = b""

    def __enter__(self) -> _HeldLocalBlob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalBlobStore:
    """Blobs in a local directory. Safe for concurrent use by threads and processes on one host.

    Also a :class:`~cache_server.storage.base.SweepsTempFiles`: a killed process leaves its temp file; and
    a :class:`~cache_server.storage.base.StoresPacks`, off by default (a local read costs no round trip).
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
        with _storage_errors():
            tmp = self._write_temp(name, chunks, metadata, sync=True)
            try:
                created = self._claim(name, tmp, final, replace)
                if created:
                    _fsync_dir(os.path.dirname(final))
                return created
            finally:
                _unlink(tmp)

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
            fd = _open_blob(final)
        except _NotAFile as exc:  # a symbolic link or a socket: nothing to lock; a create-only link decides
            if not replace(_damaged(name, exc.reason, None)):
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
            if not replace(_info_of(name, fd, held)):
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
                    _pwrite_all(fd, chunk, HEADER_SIZE + size)
                    size += len(chunk)
                header = {
                    "name": name,
                    "size": size,
                    "created": dt.datetime.now(dt.timezone.utc).isoformat(),
                    "metadata": dict(metadata),
                }
                _pwrite_all(fd, _encode_header(header), 0)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            _unlink(tmp)
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
            _fsync_dir(self._root)
            try:
                os.link(tmp, final)
            except FileExistsError:
                return False
        return True

    def batch(self) -> LocalBatch:
        """A batch: temp files written without fsync, then one filesystem sync, links, and one fsync per
        directory at commit (see :class:`~cache_server.storage.base.PutsInBatches`)."""
        return LocalBatch(self)

    # -- packs (StoresPacks) ----------------------------------------------------------------------------
    def _pack_path(self, pack_id: str) -> Path:
        return self.root / PACK_DIR / check_pack_id(pack_id)

    def put_pack(self, pack_id: str, pieces: Sequence[bytes]) -> None:
        final = self._pack_path(pack_id)
        with _storage_errors():
            tmp = self._temp_file()
            try:
                with open(tmp, "wb") as handle:
                    for piece in pieces:
                        handle.write(piece)
                    handle.flush()
                    os.fsync(handle.fileno())
                if not self._link(tmp, str(final)):
                    raise ValueError(f"The pack {pack_id} exists already.")
                _fsync_dir(final.parent)
            finally:
                _unlink(tmp)

    def read_pack(self, pack_id: str, start: int, length: int) -> bytes | None:
        try:
            with open(self._pack_path(pack_id), "rb") as handle:
                handle.seek(start)
                return handle.read(length)
        except FileNotFoundError:
            return None

    def delete_pack(self, pack_id: str) -> bool:
        return _unlink(self._pack_path(pack_id))

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
        :class:`~cache_server.storage.base.ReadsWhole`): no buffered reads, no 8 MiB read buffer per blob,
        which a bundle of small blobs paid thousands of times. A blob over ``limit`` is opened instead.
        The header is parsed only if the reader's ``info`` is asked for (a bundle never does)."""
        try:
            fd = _open_blob(self._file(name))
        except _NotAFile:
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
        return _HeldLocalBlob(name, raw, _identity(stat))

    def open(self, name: str) -> _LocalReader | None:
        """The blob opened for reading; None on a miss, and for a damaged blob (see ``stat``)."""
        try:
            fd = _open_blob(self._file(name))
        except _NotAFile:
            return None
        if fd is None:
            return None
        try:
            info = _info_of(name, fd, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        if info.damaged is not None:
            os.close(fd)
            return None
        return _LocalReader(os.fdopen(fd, "rb"), info)

    def stat(self, name: str) -> BlobInfo | None:
        """The blob's info; for a damaged one (a header that cannot be read, something other than a file)
        with ``damaged`` saying why."""
        path = self._file(name)
        try:
            fd = _open_blob(path)
        except _NotAFile as exc:
            return _damaged(name, exc.reason, None)
        if fd is None:
            return None
        try:
            return _info_of(name, fd, os.fstat(fd))
        finally:
            os.close(fd)

    def delete(self, name: str) -> bool:
        path = self._file(name)
        try:
            return _unlink(path)
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
        """Delete the temp files of dead uploads; see :class:`~cache_server.storage.base.SweepsTempFiles`.

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


@contextmanager
def _storage_errors() -> Iterator[None]:
    """A full disk, a read-only or failing one, or a blob directory removed under us: StorageUnavailable."""
    try:
        yield
    except OSError as exc:
        # ENOENT: the blob directory itself was removed under us (readyz reports it too).
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.ENOENT):
            raise StorageUnavailable(f"The local blob directory cannot be written: {exc.strerror}.") from exc
        raise


def _sync_filesystem(path: Path, files: list[str]) -> None:
    """Make the data of ``files`` (all under ``path``) durable: one ``syncfs`` where Linux has it."""
    syncfs = getattr(_LIBC, "syncfs", None) if _LIBC is not None else None
    if syncfs is not None:
        fd = os.open(path, os.O_RDONLY)
        try:
            if syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    for file in files:  # no syncfs: one fsync each
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class LocalBatch:
    """Puts into a :class:`LocalBlobStore` whose durability is paid once per commit.

    A put writes its temp file without fsync. Commit syncs the filesystem once, links each temp file to its
    final name (create-only, as ``put``), fsyncs each directory that got a name once, and removes the temp
    files. A crash before the sync leaves only temp files (swept later); after it, every name that exists
    has its whole bytes.
    """

    def __init__(self, store: LocalBlobStore) -> None:
        self._store = store
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
            or (
                os.path.lexists(self._store._file(name))
                and not self._store._judged_replaceable(name, replace)
            )
        ):
            for _ in chunks:
                pass
            if name not in self._pending:
                self._present.add(name)
            return
        with _storage_errors():
            self._pending[name] = self._store._write_temp(name, chunks, metadata, sync=False)
        if replace is not None:
            self._replace[name] = replace

    def commit(self) -> dict[str, bool]:
        pending, present, replace = self._pending, self._present, self._replace
        self._pending, self._present, self._replace = {}, set(), {}
        done = dict.fromkeys(present, False)
        try:
            with _storage_errors():
                if pending:
                    _sync_filesystem(self._store._tmp, list(pending.values()))
                directories: set[str] = set()
                for name, tmp in pending.items():
                    final = self._store._file(name)
                    done[name] = self._store._claim(name, tmp, final, replace.get(name))
                    if done[name]:
                        directories.add(os.path.dirname(final))
                for directory in directories:
                    _fsync_dir(directory)
        finally:
            for tmp in pending.values():
                _unlink(tmp)
        return done

    def abort(self) -> None:
        for tmp in self._pending.values():
            _unlink(tmp)
        self._pending, self._present, self._replace = {}, set(), {}

    def __enter__(self) -> LocalBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset`` (a write may take less than it was given, near a full disk)."""
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        offset += done
        view = view[done:]


def _unlink(path: str | Path) -> bool:
    """Remove a file; True if it was there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


class _NotAFile(Exception):
    """Something at a blob's name that cannot even be opened as a file (a symbolic link, a socket)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _open_blob(path: str) -> int | None:
    """A read-only descriptor of ``path`` (non-blocking: a FIFO planted there must not hang a read; never
    through a symbolic link: the store makes none), None if nothing is there, :class:`_NotAFile` if what is
    there cannot be opened as a file."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):  # NotADirectory: a file where the namespace should be
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _NotAFile("it is a symbolic link, not a blob file") from exc
        if exc.errno == errno.ENXIO:
            raise _NotAFile("it is a socket, not a blob file") from exc
        raise


def _info_of(name: str, fd: int, stat: os.stat_result) -> BlobInfo:
    """The info of the blob open as ``fd``; damaged if it is not a regular file or its header is bad."""
    if not stat_mode.S_ISREG(stat.st_mode):
        kind = "a directory" if stat_mode.S_ISDIR(stat.st_mode) else "not a regular file"
        return _damaged(name, f"it is {kind}, not a blob file", stat)
    return _parse_header(name, os.pread(fd, HEADER_SIZE, 0), stat.st_size, stat)


def _damaged(name: str, reason: str, stat: os.stat_result | None) -> BlobInfo:
    size = max(stat.st_size - HEADER_SIZE, 0) if stat is not None and stat_mode.S_ISREG(stat.st_mode) else 0
    created = (
        dt.datetime.fromtimestamp(stat.st_mtime, dt.timezone.utc)
        if stat is not None
        else dt.datetime.now(dt.timezone.utc)
    )
    return BlobInfo(name=name, size=size, created=created, damaged=reason)


def _parse_header(name: str, raw: bytes, file_size: int, stat: os.stat_result | None = None) -> BlobInfo:
    """The info a blob file's header holds; damaged (saying why) if it cannot be read whole and right."""
    if len(raw) < HEADER_SIZE:
        return _damaged(name, f"its header is cut short ({len(raw)} of {HEADER_SIZE} bytes)", stat)
    if not raw.startswith(MAGIC):
        return _damaged(name, "its header does not start with the blob file's magic line", stat)
    try:
        header = json.loads(raw[len(MAGIC) :].rstrip(b" \0"))
        size = int(header["size"])
        created = dt.datetime.fromisoformat(header["created"])
        metadata = header.get("metadata", {})
        if not isinstance(metadata, dict):
            raise TypeError("its metadata is not a map")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return _damaged(name, f"its header cannot be read ({type(exc).__name__}: {exc})", stat)
    if size != file_size - HEADER_SIZE:
        return _damaged(name, f"its header says {size} bytes, the file holds {file_size - HEADER_SIZE}", stat)
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.timezone.utc)
    return BlobInfo(
        name=name,
        size=size,
        created=created,
        metadata={str(k): str(v) for k, v in metadata.items()},
    )


def _encode_header(header: dict[str, object]) -> bytes:
    body = MAGIC + json.dumps(header, separators=(",", ":")).encode()
    if len(body) > HEADER_SIZE:
        raise ValueError("Blob metadata is too large for the header.")
    return body.ljust(HEADER_SIZE, b" ")
