"""File-system helpers of the local store: durable writes (``pwrite`` of all bytes, ``fsync`` of a file or
a directory, one ``syncfs`` for many files), removal, opening what is at a blob's name without following a
link or hanging on a FIFO, a file's identity, and OS errors that mean the disk cannot be written as
:class:`~cache_server.errors.StorageUnavailable`."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cache_server.errors import StorageUnavailable

__all__ = [
    "NotAFile",
    "file_identity",
    "fsync_dir",
    "open_blob",
    "pwrite_all",
    "storage_errors",
    "sync_filesystem",
    "unlink",
]

_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME, use_errno=True) if _LIBC_NAME else None


def fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_identity(stat: os.stat_result) -> tuple[int, ...]:
    """A file as it is now: device, inode, size and change times (any write or replacement changes it)."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


@contextmanager
def storage_errors() -> Iterator[None]:
    """A full disk, a read-only or failing one, or a blob directory removed under us: StorageUnavailable."""
    try:
        yield
    except OSError as exc:
        # ENOENT: the blob directory itself was removed under us (readyz reports it too).
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.ENOENT):
            raise StorageUnavailable(f"The local blob directory cannot be written: {exc.strerror}.") from exc
        raise


def sync_filesystem(path: Path, files: list[str]) -> None:
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


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset`` (a write may take less than it was given, near a full disk)."""
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        offset += done
        view = view[done:]


def unlink(path: str | Path) -> bool:
    """Remove a file; True if it was there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


class NotAFile(Exception):
    """Something at a blob's name that cannot even be opened as a file (a symbolic link, a socket)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def open_blob(path: str) -> int | None:
    """A read-only descriptor of ``path`` (non-blocking: a FIFO planted there must not hang a read; never
    through a symbolic link: the store makes none), None if nothing is there, :class:`NotAFile` if what is
    there cannot be opened as a file."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):  # NotADirectory: a file where the namespace should be
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotAFile("it is a symbolic link, not a blob file") from exc
        if exc.errno == errno.ENXIO:
            raise NotAFile("it is a socket, not a blob file") from exc
        raise
