"""The blob file format: a fixed-size header (the magic line :data:`MAGIC`, then JSON metadata padded with
spaces to :data:`HEADER_SIZE` bytes) followed by the raw bytes, so metadata and bytes appear together
atomically; and what makes a blob file damaged (a header cut short, unreadable or wrong about the size; a
directory or another non-file at the name), reported in ``BlobInfo.damaged``, never raised."""

from __future__ import annotations

import datetime as dt
import json
import os
import stat as stat_mode

from cache_server.storage.base import BlobInfo

__all__ = ["HEADER_SIZE", "MAGIC", "damaged_info", "encode_header", "info_of", "parse_header"]

MAGIC = b"XLACACHE1\n"
HEADER_SIZE = 4096


def info_of(name: str, fd: int, stat: os.stat_result) -> BlobInfo:
    """The info of the blob open as ``fd``; damaged if it is not a regular file or its header is bad."""
    if not stat_mode.S_ISREG(stat.st_mode):
        kind = "a directory" if stat_mode.S_ISDIR(stat.st_mode) else "not a regular file"
        return damaged_info(name, f"it is {kind}, not a blob file", stat)
    return parse_header(name, os.pread(fd, HEADER_SIZE, 0), stat.st_size, stat)


def damaged_info(name: str, reason: str, stat: os.stat_result | None) -> BlobInfo:
    size = max(stat.st_size - HEADER_SIZE, 0) if stat is not None and stat_mode.S_ISREG(stat.st_mode) else 0
    created = (
        dt.datetime.fromtimestamp(stat.st_mtime, dt.timezone.utc)
        if stat is not None
        else dt.datetime.now(dt.timezone.utc)
    )
    return BlobInfo(name=name, size=size, created=created, damaged=reason)


def parse_header(name: str, raw: bytes, file_size: int, stat: os.stat_result | None = None) -> BlobInfo:
    """The info a blob file's header holds; damaged (saying why) if it cannot be read whole and right."""
    if len(raw) < HEADER_SIZE:
        return damaged_info(name, f"its header is cut short ({len(raw)} of {HEADER_SIZE} bytes)", stat)
    if not raw.startswith(MAGIC):
        return damaged_info(name, "its header does not start with the blob file's magic line", stat)
    try:
        header = json.loads(raw[len(MAGIC) :].rstrip(b" \0"))
        size = int(header["size"])
        created = dt.datetime.fromisoformat(header["created"])
        metadata = header.get("metadata", {})
        if not isinstance(metadata, dict):
            raise TypeError("its metadata is not a map")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return damaged_info(name, f"its header cannot be read ({type(exc).__name__}: {exc})", stat)
    if size != file_size - HEADER_SIZE:
        return damaged_info(
            name, f"its header says {size} bytes, the file holds {file_size - HEADER_SIZE}", stat
        )
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.timezone.utc)
    return BlobInfo(
        name=name,
        size=size,
        created=created,
        metadata={str(k): str(v) for k, v in metadata.items()},
    )


def encode_header(header: dict[str, object]) -> bytes:
    body = MAGIC + json.dumps(header, separators=(",", ":")).encode()
    if len(body) > HEADER_SIZE:
        raise ValueError("Blob metadata is too large for the header.")
    return body.ljust(HEADER_SIZE, b" ")
