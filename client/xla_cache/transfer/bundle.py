"""Reading a bundle (``POST .../bundle``, one tar stream) into the cache directory, verified member by member.

The stream is read by the protocol's strict reader (:class:`cache_protocol.tar.TarReader`, the one the server
reads uploads with): regular files only, anything else ends the bundle. Only members whose name is a
requested key and whose size matches the manifest are written, each through
:class:`xla_cache.localcache.cachedir.VerifiedWriter`. So a hostile or broken stream cannot write outside
the directory, plant links, or leave a partial entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cache_protocol.tar import BadTar, TarReader
from xla_cache.errors import CorruptTransfer
from xla_cache.http.api import RemoteEntry
from xla_cache.localcache.cachedir import EntryCheck, VerifiedWriter
from xla_cache.transfer.trust import EntryTrust

__all__ = ["BundleResult", "extract_bundle"]


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
    trust: EntryTrust | None = None,
) -> BundleResult:
    """Write every verified member of the tar stream ``chunks`` into ``directory``.

    A member that is not requested, of the wrong size or the wrong SHA-256 is skipped and named in
    ``errors``; one that ``trust`` refuses is skipped (it counts them); a member that is not a regular
    file, or a stream that is not a valid tar, ends the bundle
    with an error. Errors from ``chunks`` itself (the server going away, the deadline) propagate.
    """
    result = BundleResult()
    seen: set[str] = set()
    try:
        pieces = (chunk for chunk in chunks if chunk)  # an empty piece is not the end
        for member in TarReader(lambda _size: next(pieces, b"")).members():  # it buffers what it is given
            if should_stop is not None and should_stop():
                break
            entry = wanted.get(member.name)
            if entry is None or member.name in seen:
                result.errors.append(f"the bundle holds an unrequested member {member.name[:80]!r}")
                continue
            seen.add(member.name)
            if member.size != entry.size:
                result.errors.append(
                    f"entry {entry.key}: the bundle holds {member.size} bytes, the manifest {entry.size}"
                )
                continue
            if trust is not None and not trust.allows(entry):
                continue
            try:
                with VerifiedWriter(
                    directory, entry.key, size=entry.size, sha256=entry.sha256, check=check
                ) as writer:
                    for chunk in member.chunks():
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
    except BadTar as exc:
        result.errors.append(f"the bundle is not a valid tar stream ({exc})")
    return result
