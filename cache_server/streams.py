"""Byte streams: joining small pieces into fewer, larger ones (for the upload bridge and the bundle), and
zstd compression of bundles both ways (content negotiation is the HTTP layer's)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import IO, cast

import zstandard

__all__ = [
    "PIECE",
    "ZSTD_LEVEL",
    "ZSTD_MAX_WINDOW",
    "ZSTD_PIECE",
    "Coalescer",
    "NotZstd",
    "ZstdFrames",
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
    """``read(n)`` over an iterator of pieces (what the zstd stream reader pulls from); each piece is shown
    to ``seen`` as it is handed out."""

    def __init__(self, pieces: Iterable[bytes], seen: Callable[[bytes], None] | None = None) -> None:
        self._pieces = iter(pieces)
        self._seen = seen
        self._current = b""

    def read(self, size: int = -1) -> bytes:
        while not self._current:
            piece = next(self._pieces, None)
            if piece is None:
                return b""
            if self._seen is not None:
                self._seen(piece)
            self._current = piece
        size = len(self._current) if size < 0 else size
        out, self._current = self._current[:size], self._current[size:]
        return out


_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC = 0x184D2A50  # ... to 0x184D2A5F: a frame of bytes the decoder skips
_DICT_ID_BYTES = (0, 1, 2, 4)
_CONTENT_SIZE_BYTES = (0, 2, 4, 8)


class ZstdFrames:
    """Follows the frames of a zstd stream (RFC 8878, section 3.1) from their headers alone, without decoding
    them: so that a stream that ends inside a frame is told from one that ends after its last frame (the
    decoder ends quietly either way). Costs a few steps per block (128 KiB of output at most)."""

    def __init__(self) -> None:
        self._head = b""  # the bytes of the header being read: a magic number, a frame or a block header
        self._want = 4
        self._skip = 0  # bytes to pass over: a frame header's rest, a block's content, a checksum
        self._state = "magic"
        self._checksum = False
        self.frames = 0

    @property
    def at_frame_end(self) -> bool:
        """Whether the bytes seen so far end where a frame ends (or are none)."""
        return self._state == "magic" and not self._head and not self._skip

    def feed(self, data: bytes) -> None:
        """See the next bytes of the stream; :class:`NotZstd` where they cannot start a frame."""
        position = 0
        while position < len(data):
            if self._skip:
                step = min(self._skip, len(data) - position)
                self._skip -= step
                position += step
                continue
            take = data[position : position + self._want - len(self._head)]
            self._head += take
            position += len(take)
            if len(self._head) == self._want:
                head, self._head = self._head, b""
                self._parsed(head)

    def _parsed(self, head: bytes) -> None:
        if self._state == "magic":
            magic = int.from_bytes(head, "little")
            if magic == _ZSTD_MAGIC:
                self._state, self._want = "frame", 1
            elif magic & 0xFFFFFFF0 == _SKIPPABLE_MAGIC:
                self._state, self._want = "skippable", 4
            else:
                raise NotZstd("the body is not valid zstd (data that is not a zstd frame follows a frame)")
        elif self._state == "skippable":
            self._skip = int.from_bytes(head, "little")
            self._state, self._want = "magic", 4
            self.frames += 1
        elif self._state == "frame":
            descriptor = head[0]
            single_segment = bool(descriptor & 0x20)
            size_flag = descriptor >> 6
            content_size = _CONTENT_SIZE_BYTES[size_flag] or (1 if single_segment else 0)
            self._checksum = bool(descriptor & 0x04)
            self._skip = (0 if single_segment else 1) + _DICT_ID_BYTES[descriptor & 0x03] + content_size
            self._state, self._want = "block", 3
        else:  # a block header: last-block bit, type (raw, RLE, compressed, reserved), size
            header = int.from_bytes(head, "little")
            kind, size = (header >> 1) & 0x03, header >> 3
            if kind == 3:
                raise NotZstd("the body is not valid zstd (a block of the reserved type)")
            self._skip = 1 if kind == 1 else size
            if header & 1:
                self._skip += 4 if self._checksum else 0
                self._state, self._want = "magic", 4
                self.frames += 1


def zstd_decompressed(pieces: Iterable[bytes], *, chunk: int = PIECE) -> Iterator[bytes]:
    """The bytes of every zstd frame in ``pieces`` (RFC 8878: a stream may hold several, as ``pzstd`` or
    ``cat a.zst b.zst`` make), at most ``chunk`` at a time: a small input that expands hugely is released
    piece by piece, never held whole. :class:`NotZstd` for bytes that are not zstd (garbage after a frame
    included), for a stream that ends inside a frame, and for a frame whose window (the memory its decoding
    holds) is over :data:`ZSTD_MAX_WINDOW`."""
    decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    frames = ZstdFrames()
    try:
        source = cast(IO[bytes], _PieceReader(pieces, frames.feed))  # the reader needs only read(size)
        reader = decompressor.stream_reader(source, read_size=PIECE, read_across_frames=True, closefd=False)
        while piece := reader.read(chunk):
            yield piece
    except zstandard.ZstdError as exc:
        if "too much memory" in str(exc):
            raise NotZstd(
                f"a zstd frame of the body needs a window over {ZSTD_MAX_WINDOW >> 20} MiB of memory to "
                "decode (compress at level 19 or lower, without --long or --ultra)"
            ) from None
        raise NotZstd(f"the body is not valid zstd ({exc})") from None
    if not frames.at_frame_end:
        raise NotZstd("the body ends inside a zstd frame (cut short)")
