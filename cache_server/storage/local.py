"""Local-directory blob store: the embedded default.

Layout: ``<root>/<namespace>/<key>`` for blobs, ``<root>/.tmp/`` for uploads in progress. Each blob file
starts with a fixed-size header (magic line, then JSON metadata padded with spaces to
:data:`HEADER_SIZE` bytes) followed by the raw bytes, so metadata and bytes appear together atomically.

A put writes a private temp file, fsyncs it, then ``os.link``s it to its final name: link fails if the
name exists, which makes create-only atomic across threads and processes; the directory is fsynced so the
new name survives a crash. Names are validated before any path is built.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import BinaryIO
from urllib.parse import unquote, urlparse

from cache_server.errors import InvalidName, StorageUnavailable
from cache_server.names import check_key, check_namespace
from cache_server.storage.base import READ_CHUNK, BlobInfo, blob_name, parse_blob_name

__all__ = ["HEADER_SIZE", "LocalBlobStore"]

MAGIC = b"XLACACHE1\n"
HEADER_SIZE = 4096
TMP_DIR = ".tmp"
STALE_TEMP_SECONDS = 3600.0


def _is_valid(check: Callable[[str], str], value: str) -> bool:
    try:
        check(value)
    except InvalidName:
        return False
    return True


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _LocalReader:
    """An open local blob."""

    def __init__(self, handle: BinaryIO, info: BlobInfo) -> None:
        self._handle = handle
        self.info = info

    def chunks(self) -> Iterator[bytes]:
        self._handle.seek(HEADER_SIZE)
        while chunk := self._handle.read(READ_CHUNK):
            yield chunk

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> _LocalReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class LocalBlobStore:
    """Blobs in a local directory. Safe for concurrent use by threads and processes on one host.

    Also a :class:`~cache_server.storage.base.SweepsTempFiles`: a killed process leaves its temp file.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._tmp = root / TMP_DIR
        self._tmp.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_url(cls, url: str) -> LocalBlobStore:
        """Build from ``file:///abs/path`` (or ``file://relative/path``)."""
        parsed = urlparse(url)
        path = unquote(parsed.netloc + parsed.path)
        if not path:
            raise ValueError(f"Storage URL {url!r} names no directory.")
        return cls(Path(path))

    def _path(self, name: str) -> Path:
        namespace, key = parse_blob_name(name)
        return self.root / namespace / key

    # -- writing ----------------------------------------------------------------------------------------
    def put(self, name: str, chunks: Iterable[bytes], metadata: Mapping[str, str]) -> bool:
        final = self._path(name)
        if final.exists():
            for _ in chunks:  # let a checking iterator see every byte and raise if it must
                pass
            return False
        tmp = self._tmp / f"{uuid.uuid4().hex}.part"
        try:
            with open(tmp, "wb") as handle:
                handle.write(b"\0" * HEADER_SIZE)
                size = 0
                for chunk in chunks:
                    handle.write(chunk)
                    size += len(chunk)
                created = dt.datetime.now(dt.timezone.utc)
                header = {
                    "name": name,
                    "size": size,
                    "created": created.isoformat(),
                    "metadata": dict(metadata),
                }
                handle.seek(0)
                handle.write(_encode_header(header))
                handle.flush()
                os.fsync(handle.fileno())
            if not final.parent.is_dir():
                final.parent.mkdir(parents=True, exist_ok=True)
                _fsync_dir(self.root)  # the new namespace directory must survive a crash too
            try:
                os.link(tmp, final)
            except FileExistsError:
                return False
            _fsync_dir(final.parent)
            return True
        except OSError as exc:
            # ENOENT: the blob directory itself was removed under us (readyz reports it too).
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.ENOENT):
                raise StorageUnavailable(
                    f"The local blob directory cannot be written: {exc.strerror}."
                ) from exc
            raise
        finally:
            tmp.unlink(missing_ok=True)

    # -- reading ----------------------------------------------------------------------------------------
    def _read_info(self, name: str, handle: BinaryIO) -> BlobInfo | None:
        raw = handle.read(HEADER_SIZE)
        if len(raw) < HEADER_SIZE or not raw.startswith(MAGIC):
            return None
        header = json.loads(raw[len(MAGIC) :].rstrip(b" \0"))
        return BlobInfo(
            name=name,
            size=int(header["size"]),
            created=dt.datetime.fromisoformat(header["created"]),
            metadata={str(k): str(v) for k, v in header.get("metadata", {}).items()},
        )

    def open(self, name: str) -> _LocalReader | None:
        path = self._path(name)
        try:
            handle = open(path, "rb")  # noqa: SIM115 - the reader owns it and closes it
        except FileNotFoundError:
            return None
        info = self._read_info(name, handle)
        if info is None:
            handle.close()
            return None
        return _LocalReader(handle, info)

    def stat(self, name: str) -> BlobInfo | None:
        path = self._path(name)
        try:
            with open(path, "rb") as handle:
                return self._read_info(name, handle)
        except FileNotFoundError:
            return None

    def delete(self, name: str) -> bool:
        path = self._path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True

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


def _encode_header(header: dict[str, object]) -> bytes:
    body = MAGIC + json.dumps(header, separators=(",", ":")).encode()
    if len(body) > HEADER_SIZE:
        raise ValueError("Blob metadata is too large for the header.")
    return body.ljust(HEADER_SIZE, b" ")
