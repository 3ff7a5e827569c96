"""The local store's files, shared by the store and its batch (as the GCS store's transport is by its
parts): where a blob's file is, temp files written with or without fsync, the create-only link or the
locked swap that gives one its name, what is at a name, and moving a damaged blob aside."""

from __future__ import annotations

import datetime as dt
import fcntl
import itertools
import os
import stat as stat_mode
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from cache_server.storage.base import DAMAGED_DIR, BlobInfo, ReplaceJudge, parse_blob_name
from cache_server.storage.local.files import NotAFile, fsync_dir, open_blob, pwrite_all, unlink
from cache_server.storage.local.header import HEADER_SIZE, damaged_info, encode_header, info_of

__all__ = ["TMP_DIR", "BlobFiles"]

TMP_DIR = ".tmp"


class BlobFiles:
    """The files of a local store rooted at ``root``: blobs at ``<root>/<namespace>/<key>``, temp files in
    ``<root>/.tmp``, damaged blobs moved into ``<root>/.damaged``. Safe for threads and processes."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.tmp = root / TMP_DIR
        self.tmp.mkdir(parents=True, exist_ok=True)
        self._tmp_dir = str(self.tmp)
        # temp file names: pid, a random tag and a count (unique across threads, processes and forks)
        self._tag = uuid.uuid4().hex[:8]
        self._numbers = itertools.count()

    def path(self, name: str) -> Path:
        return Path(self.file(name))

    def file(self, name: str) -> str:
        """The path of blob ``name``, as a string (pathlib's joins were a tenth of a small blob's cost)."""
        namespace, key = parse_blob_name(name)
        return os.path.join(self.root, namespace, key)

    def stat(self, name: str) -> BlobInfo | None:
        """The blob's info; for a damaged one (a header that cannot be read, something other than a file)
        with ``damaged`` saying why."""
        path = self.file(name)
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

    def judged_replaceable(self, name: str, replace: ReplaceJudge | None) -> bool:
        """Whether a put should write its bytes although the name is taken: ``replace`` wants the blob
        there now replaced (judged again, under a lock, before the swap), or it is gone meanwhile."""
        if replace is None:
            return False
        info = self.stat(name)
        return info is None or replace(info)

    def claim(self, name: str, tmp: str, final: str, replace: ReplaceJudge | None) -> bool:
        """Give a durable temp file the name ``final``: created if free, else swapped in for the blob there
        if ``replace`` still judges it replaceable under an exclusive lock on it (see the module docstring).
        The directory is not fsynced here."""
        if self.link(tmp, final):
            return True
        if replace is None:
            return False
        try:
            fd = open_blob(final)
        except NotAFile as exc:  # a symbolic link or a socket: nothing to lock; a create-only link decides
            if not replace(damaged_info(name, exc.reason, None)):
                return False
            self.move_aside(name, final)
            return self.link(tmp, final)
        if fd is None:  # removed meanwhile: the name is free again
            return self.link(tmp, final)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                now = os.stat(final)
            except FileNotFoundError:
                return self.link(tmp, final)
            if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                return False  # another replacer swapped it first: its blob is not the one judged
            if not replace(info_of(name, fd, held)):
                return False
            if stat_mode.S_ISREG(held.st_mode):
                os.rename(tmp, final)
                return True
            self.move_aside(name, final)  # a directory (or another non-file) cannot be renamed over
            return self.link(tmp, final)
        finally:
            os.close(fd)

    def move_aside(self, name: str, path: str) -> bool:
        """Move what is at ``path`` (blob ``name``'s) into the damaged folder; True if it was there."""
        namespace, key = parse_blob_name(name)
        aside = os.path.join(self.root, DAMAGED_DIR, namespace)
        os.makedirs(aside, exist_ok=True)
        try:
            os.rename(path, os.path.join(aside, f"{key}.{uuid.uuid4().hex[:8]}"))
        except FileNotFoundError:
            return False
        return True

    def temp_file(self) -> str:
        return os.path.join(self._tmp_dir, f"{os.getpid():x}-{self._tag}-{next(self._numbers):x}.part")

    def write_temp(
        self, name: str, chunks: Iterable[bytes], metadata: Mapping[str, str], *, sync: bool
    ) -> str:
        """The blob, header and bytes, in a new temp file (fsynced if ``sync``); removed if chunks raise.
        The bytes are written after the header's place, then the header (which holds their size)."""
        tmp = self.temp_file()
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

    def link(self, tmp: str, final: str) -> bool:
        """Give a durable temp file its final name, if that is free (the directory is not fsynced here)."""
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        except FileNotFoundError:  # the namespace's first blob: its directory must survive a crash too
            os.makedirs(os.path.dirname(final), exist_ok=True)
            fsync_dir(self.root)
            try:
                os.link(tmp, final)
            except FileExistsError:
                return False
        return True
