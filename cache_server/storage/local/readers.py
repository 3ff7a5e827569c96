"""Readers of local blobs: a file streamed from after its header, or a small blob read whole."""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import TracebackType
from typing import BinaryIO

from cache_server.storage.base import READ_CHUNK, BlobInfo
from cache_server.storage.local.files import file_identity
from cache_server.storage.local.header import HEADER_SIZE, parse_header

__all__ = ["LOCAL_READ_CHUNK", "HeldLocalBlob", "LocalReader"]

LOCAL_READ_CHUNK = 8 * READ_CHUNK
"""A local file is read in pieces of 8 MiB: each piece of a download is one hop to a worker thread, and
fewer, larger pieces make a large download much faster than pieces of :data:`READ_CHUNK` would."""


class LocalReader:
    """An open local blob. ``identity`` (:attr:`~cache_server.storage.base.BlobReader.identity`) names this
    very file as it is now (device, inode, size, times): the service trusts a blob it has hashed whole until
    its identity changes."""

    def __init__(self, handle: BinaryIO, info: BlobInfo) -> None:
        self._handle = handle
        self.info = info
        self.identity = file_identity(os.fstat(handle.fileno()))

    def chunks(self) -> Iterator[bytes]:
        self._handle.seek(HEADER_SIZE)
        while chunk := self._handle.read(LOCAL_READ_CHUNK):
            yield chunk

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> LocalReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class HeldLocalBlob:
    """A small local blob read whole; ``identity`` as for :class:`LocalReader`. Its header is parsed only
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
            info = parse_header(self._name, self._header, HEADER_SIZE + self._size)
            self._info = BlobInfo(self._name, self._size, info.created, info.metadata, info.damaged)
        return self._info

    def chunks(self) -> Iterator[bytes]:
        if self._data:
            yield self._data

    def close(self) -> None:
        self._data = b""

    def __enter__(self) -> HeldLocalBlob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
