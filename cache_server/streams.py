"""Byte streams: joining small pieces into fewer, larger ones (for the upload bridge and the bundle)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["PIECE", "Coalescer", "coalesce"]

PIECE = 1024 * 1024
"""The size pieces are joined up to: large enough that a write or a thread hop costs little per byte."""


class Coalescer:
    """Collects pieces and hands them back joined, once at least ``size`` bytes have gathered."""

    def __init__(self, size: int = PIECE) -> None:
        self._size = size
        self._buffer = bytearray()

    def push(self, piece: bytes) -> bytes | None:
        """Add ``piece``; returns the joined bytes when there are ``size`` or more, else None."""
        self._buffer += piece
        return self.rest() if len(self._buffer) >= self._size else None

    def rest(self) -> bytes | None:
        """What is left (None when nothing is)."""
        if not self._buffer:
            return None
        joined = bytes(self._buffer)
        self._buffer.clear()
        return joined


def coalesce(pieces: Iterable[bytes], size: int = PIECE) -> Iterator[bytes]:
    """``pieces`` joined into pieces of at least ``size`` bytes (the last one may be smaller)."""
    joiner = Coalescer(size)
    for piece in pieces:
        if (joined := joiner.push(piece)) is not None:
            yield joined
    if (joined := joiner.rest()) is not None:
        yield joined
