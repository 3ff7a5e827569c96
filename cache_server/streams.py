"""Byte streams: joining small pieces into fewer, larger ones (for the upload bridge and the bundle), and
zstd compression of bundles both ways (content negotiation is the HTTP layer's)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, cast

import zstandard

__all__ = [
    "PIECE",
    "ZSTD_LEVEL",
    "ZSTD_MAX_WINDOW",
    "ZSTD_PIECE",
    "Coalescer",
    "NotZstd",
    "accepts_zstd",
    "coalesce",
    "zstd_compressed",
    "zstd_decompressed",
]

ZSTD_LEVEL = 3  # about 48x on executables of one graph at many shapes, at hundreds of MB/s

PIECE = 1024 * 1024
"""The size pieces are joined up to: large enough that a write or a thread hop costs little per byte."""
ZSTD_MAX_WINDOW = 8 * 1024 * 1024
"""The largest zstd window the server decodes, for an upload or a stored JAX entry: zstd's levels up to 19
stay within it (the client's and JAX's level 3 need 2 MiB); ``--long`` and ``--ultra`` frames need up to
128 MiB of the server's memory each, and are refused."""
ZSTD_PIECE = 64 * 1024
"""... and compressed pieces: executables of one graph shrink 10-50 times in a zstd stream, so a MiB of
them could be a whole upload, and the server would store nothing until all of it had arrived."""


class Coalescer:
    """Collects pieces and hands them back joined, once at least ``size`` bytes have gathered."""

    def __init__(self, size: int = PIECE) -> None:
        self._size = size
        self._pieces: list[bytes] = []
        self._held = 0

    def push(self, piece: bytes) -> bytes | None:
        """Add ``piece``; returns the joined bytes when there are ``size`` or more, else None."""
        self._pieces.append(piece)
        self._held += len(piece)
        return self.rest() if self._held >= self._size else None

    def rest(self) -> bytes | None:
        """What is left (None when nothing is); joined with one copy (a bytearray to add to cost two)."""
        if not self._held:
            return None
        joined = b"".join(self._pieces)
        self._pieces.clear()
        self._held = 0
        return joined


def coalesce(pieces: Iterable[bytes], size: int = PIECE) -> Iterator[bytes]:
    """``pieces`` joined into pieces of at least ``size`` bytes (the last one may be smaller)."""
    joiner = Coalescer(size)
    for piece in pieces:
        if (joined := joiner.push(piece)) is not None:
            yield joined
    if (joined := joiner.rest()) is not None:
        yield joined


def accepts_zstd(accept_encoding: str | None) -> bool:
    """Whether an ``Accept-Encoding`` header admits ``zstd`` (and does not refuse it with ``q=0``)."""
    for part in (accept_encoding or "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() == "zstd":
            quality = params.strip().removeprefix("q=").strip() if params.strip().startswith("q=") else "1"
            try:
                return float(quality) > 0
            except ValueError:
                return False
    return False


def zstd_compressed(pieces: Iterable[bytes], level: int = ZSTD_LEVEL) -> Iterator[bytes]:
    """``pieces`` as one zstd frame, yielded as the compressor completes blocks (and flushed per piece, so a
    slow stream still reaches its reader piece by piece)."""
    compressor = zstandard.ZstdCompressor(level=level).compressobj()
    for piece in pieces:
        out = compressor.compress(piece) + compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        if out:
            yield out
    yield compressor.flush()


class NotZstd(ValueError):
    """Bytes sent as zstd that are not."""


class _PieceReader:
    """``read(n)`` over an iterator of pieces (what the zstd stream reader pulls from)."""

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self._pieces = iter(pieces)
        self._current = b""

    def read(self, size: int = -1) -> bytes:
        while not self._current:
            piece = next(self._pieces, None)
            if piece is None:
                return b""
            self._current = piece
        size = len(self._current) if size < 0 else size
        out, self._current = self._current[:size], self._current[size:]
        return out


def zstd_decompressed(pieces: Iterable[bytes], *, chunk: int = PIECE) -> Iterator[bytes]:
    """The bytes of the zstd frames in ``pieces``, at most ``chunk`` at a time: a small input that expands
    hugely is released piece by piece, never held whole. :class:`NotZstd` for bytes that are not zstd, and
    for a frame whose window (the memory its decoding holds) is over :data:`ZSTD_MAX_WINDOW`."""
    decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    try:
        source = cast(IO[bytes], _PieceReader(pieces))  # read_to_iter needs only read(size)
        yield from decompressor.read_to_iter(source, read_size=PIECE, write_size=chunk)
    except zstandard.ZstdError as exc:
        if "too much memory" in str(exc):
            raise NotZstd(
                f"a zstd frame of the body needs a window over {ZSTD_MAX_WINDOW >> 20} MiB of memory to "
                "decode (compress at level 19 or lower, without --long or --ultra)"
            ) from None
        raise NotZstd(f"the body is not valid zstd ({exc})") from None
