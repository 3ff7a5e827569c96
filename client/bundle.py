"""Reading a bundle (``POST .../bundle``, one tar stream) into the cache directory, verified member by member.

Members are never extracted with tarfile's own extraction: only regular files whose name is a requested key
and whose size matches the manifest are read, each through :class:`client.cachedir.VerifiedWriter`. So a
hostile or broken stream cannot write outside the directory, plant links, or leave a partial entry.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from client.api import RemoteEntry
from client.cachedir import CHUNK, EntryCheck, VerifiedWriter
from client.errors import CorruptTransfer

__all__ = ["BundleResult", "ChunkReader", "extract_bundle"]


class ChunkReader(io.RawIOBase):
    """A read-only file over an iterator of byte chunks (what tarfile's stream mode reads)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._current = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._current:
            try:
                self._current = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._current))
        buffer[:size] = self._current[:size]
        self._current = self._current[size:]
        return size


@dataclass
class BundleResult:
    """What one bundle brought: keys written, their bytes, and why others were refused."""

    written: list[str] = field(default_factory=list)
    bytes: int = 0
    errors: list[str] = field(default_factory=list)


def extract_bundle(
    chunks: Iterator[bytes],
    wanted: Mapping[str, RemoteEntry],
    directory: Path,
    *,
    on_bytes: Callable[[int], None] | None = None,
    on_entry: Callable[[RemoteEntry], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    check: EntryCheck | None = None,
) -> BundleResult:
    """Write every verified member of the tar stream ``chunks`` into ``directory``.

    A member that is not requested, not a regular file, of the wrong size or the wrong SHA-256 is skipped
    and named in ``errors``; a stream that is not a valid tar ends the bundle with an error. Errors from
    ``chunks`` itself (the server going away, the deadline) propagate.
    """
    result = BundleResult()
    seen: set[str] = set()
    reader = io.BufferedReader(ChunkReader(chunks), CHUNK)
    try:
        with tarfile.open(fileobj=reader, mode="r|") as archive:
            for member in archive:
                if should_stop is not None and should_stop():
                    break
                entry = wanted.get(member.name)
                if entry is None or member.name in seen:
                    result.errors.append(f"the bundle holds an unrequested member {member.name[:80]!r}")
                    continue
                seen.add(member.name)
                if not member.isreg():
                    result.errors.append(f"entry {entry.key}: the bundle member is not a regular file")
                    continue
                if member.size != entry.size:
                    result.errors.append(
                        f"entry {entry.key}: the bundle holds {member.size} bytes, the manifest {entry.size}"
                    )
                    continue
                source = archive.extractfile(member)
                if source is None:  # pragma: no cover - isreg() members always have data
                    continue
                try:
                    with VerifiedWriter(
                        directory, entry.key, size=entry.size, sha256=entry.sha256, check=check
                    ) as writer:
                        while chunk := source.read(CHUNK):
                            writer.write(chunk)
                            if on_bytes is not None:
                                on_bytes(len(chunk))
                        writer.commit()
                except CorruptTransfer as exc:
                    result.errors.append(exc.reason)
                    continue
                result.written.append(entry.key)
                result.bytes += entry.size
                if on_entry is not None:
                    on_entry(entry)
    except tarfile.TarError as exc:
        result.errors.append(f"the bundle is not a valid tar stream ({exc})")
    return result
