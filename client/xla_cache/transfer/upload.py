"""Uploading entries from a cache directory: ask ``missing`` first, then send each lacking entry with its
digest (and compile time), small ones together in bulk uploads, large ones each in its own PUT. Every
file is read once and its digest checked as it is sent: one that changed meanwhile is not uploaded.
Downloading is :mod:`xla_cache.transfer.download`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from cache_protocol import BUNDLE_COMPILE_TIME_PAX, BUNDLE_SHA256_PAX
from cache_protocol.signing import SIGNATURE_PAX
from cache_protocol.tar import BLOCK, END, member_header, padding
from xla_cache.errors import ClientError, ServerError, ServerProblem, ServerUnavailable
from xla_cache.http.api import CacheApi
from xla_cache.http.deadline import Deadline
from xla_cache.localcache.cachedir import (
    CHUNK,
    LocalFile,
    file_sha256,
)
from xla_cache.transfer.progress import NullProgress, Progress

__all__ = [
    "BULK_GROUP_BYTES",
    "BULK_GROUP_ENTRIES",
    "BULK_MEMBER_LIMIT",
    "FileChanged",
    "UploadResult",
    "upload_entries",
    "upload_file",
]


class FileChanged(ClientError):
    """An entry file changed while it was being uploaded (it is retried later)."""


def _file_chunks(path: Path, size: int, sha256: str, on_bytes: Progress) -> Iterator[bytes]:
    digest = hashlib.sha256()
    left = size
    with open(path, "rb") as handle:
        while left:
            chunk = handle.read(min(CHUNK, left))
            if not chunk:
                raise FileChanged(f"{path} shrank while it was being uploaded")
            left -= len(chunk)
            digest.update(chunk)
            on_bytes.advance(nbytes=len(chunk))
            yield chunk
    if digest.hexdigest() != sha256:
        raise FileChanged(f"{path} changed while it was being uploaded")


def upload_file(
    api: CacheApi,
    namespace: str,
    item: LocalFile,
    deadline: Deadline,
    *,
    compile_time_ms: int | None = None,
    progress: Progress | None = None,
    uploader: str | None = None,
) -> tuple[int, str, int]:
    """Upload one file; returns (HTTP status, its SHA-256, its size)."""
    size = os.stat(item.path).st_size
    sha256 = file_sha256(item.path)
    status = api.put_entry(
        namespace,
        item.key,
        _file_chunks(item.path, size, sha256, progress or NullProgress()),
        size=size,
        sha256=sha256,
        compile_time_ms=compile_time_ms,
        deadline=deadline,
        uploader=uploader,
    )
    return status, sha256, size


@dataclass
class UploadResult:
    """What an upload pass did."""

    stored: int = 0
    already_present: int = 0
    conflicts: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)  # keys the server has now (ours or an equal-key entry)
    retry: list[str] = field(default_factory=list)  # keys to try again later
    refused: list[str] = field(default_factory=list)  # keys the server refuses for good (403: a signature)
    problem: ServerProblem | None = None  # the first server failure met, if any


def upload_entries(
    api: CacheApi,
    namespace: str,
    files: list[LocalFile],
    deadline: Deadline,
    *,
    compile_times: Mapping[str, int] | None = None,
    progress: Progress | None = None,
    workers: int = 1,
    uploader: str | None = None,
) -> UploadResult:
    """Ask which of ``files`` the server lacks, then upload those. Server trouble raises ServerProblem
    only for the ``missing`` question; a failed upload of one entry is recorded and the others continue.
    ``uploader``: what each upload declares as its ``X-Uploader`` (a prefill's provenance)."""
    progress = progress or NullProgress()
    compile_times = compile_times or {}
    result = UploadResult()
    if not files:
        return result
    lacking = set(api.missing(namespace, [item.key for item in files], deadline))
    to_send = [item for item in files if item.key in lacking]
    for item in files:
        if item.key not in lacking:
            result.already_present += 1
            result.done.append(item.key)
    lock = threading.Lock()
    give_up = threading.Event()
    progress.start("upload", len(to_send), sum(item.size for item in to_send))

    def send(item: LocalFile) -> None:
        if give_up.is_set() or deadline.expired():
            with lock:
                result.retry.append(item.key)
            return
        try:
            status, _, size = upload_file(
                api,
                namespace,
                item,
                deadline,
                compile_time_ms=compile_times.get(item.key),
                progress=progress,
                uploader=uploader,
            )
        except (FileChanged, FileNotFoundError) as exc:
            with lock:
                result.retry.append(item.key)
                result.errors.append(str(exc))
            return
        except ServerProblem as exc:
            if isinstance(exc, ServerUnavailable):
                give_up.set()
            with lock:
                result.retry.append(item.key)
                result.errors.append(exc.reason)
                if result.problem is None or isinstance(exc, ServerUnavailable):
                    result.problem = exc
            return
        with lock:
            if status == 201:
                result.stored += 1
                result.bytes += size
            elif status == 409:
                result.conflicts += 1
            else:
                result.already_present += 1
            result.done.append(item.key)
        progress.advance(entries=1)

    small = [item for item in to_send if item.size <= BULK_MEMBER_LIMIT]
    try:
        if small and not give_up.is_set():
            try:
                for group in _bulk_groups(small):
                    if deadline.expired():
                        result.retry.extend(item.key for item in group)
                        continue
                    _send_bulk(api, namespace, group, deadline, compile_times, result, progress, uploader)
            except ServerError as exc:
                if exc.status not in (404, 405):  # 404/405: a server without bulk upload
                    raise
                to_send = [item for item in to_send if item.key not in set(result.done)]
            else:
                to_send = [item for item in to_send if item.size > BULK_MEMBER_LIMIT]
        if workers <= 1:
            # No executor: this also runs inside atexit handlers, where new threads cannot be scheduled.
            for item in to_send:
                send(item)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(send, to_send))
    except ServerProblem as exc:
        result.retry.extend(item.key for item in to_send if item.key not in set(result.done))
        result.errors.append(exc.reason)
        result.problem = result.problem or exc
    finally:
        progress.close()
    result.retry = list(dict.fromkeys(result.retry))
    return result


BULK_MEMBER_LIMIT = 8 * 1024 * 1024  # files up to this size go in bulk uploads; larger ones each in a PUT
BULK_GROUP_BYTES = 64 * 1024 * 1024  # one bulk request carries at most this many bytes of entries ...
BULK_GROUP_ENTRIES = 2000  # ... and at most this many entries


def _bulk_groups(items: list[LocalFile]) -> Iterator[list[LocalFile]]:
    group: list[LocalFile] = []
    size = 0
    for item in items:
        if group and (len(group) >= BULK_GROUP_ENTRIES or size + item.size > BULK_GROUP_BYTES):
            yield group
            group, size = [], 0
        group.append(item)
        size += item.size
    if group:
        yield group


def _send_bulk(
    api: CacheApi,
    namespace: str,
    group: list[LocalFile],
    deadline: Deadline,
    compile_times: Mapping[str, int],
    result: UploadResult,
    progress: Progress,
    uploader: str | None = None,
) -> None:
    """One bulk request for ``group``; each member's answer goes into ``result``. A file that vanished
    or cannot be read is retried later.

    With a signing key the group is signed as one batch (:meth:`Signer.sign_batch`: one Ed25519 signature,
    so a warm verifies one per batch), which needs every digest before the first member is sent: the files
    are hashed first, and a file that changed before it is sent is refused by the server (400: its digest)
    and retried later."""
    sent: dict[str, int] = {}
    signatures: dict[str, tuple[str, str]] = {}  # key -> (sha256, signature)
    if api.signer is not None:
        digests: dict[str, str] = {}
        for item in group:
            try:
                digests[item.key] = file_sha256(item.path)
            except OSError:
                continue  # the stream meets it again and retries it
        batch = api.signer.sign_batch(namespace, list(digests.items()))
        signatures = {key: (digest, sig) for (key, digest), sig in zip(digests.items(), batch, strict=True)}

    def stream() -> Iterator[bytes]:
        sent.clear()
        for item in group:
            try:
                data = item.path.read_bytes()
            except OSError as exc:
                result.retry.append(item.key)
                result.errors.append(f"{item.key}: {exc.strerror or exc}")
                continue
            if item.key in signatures:
                sha256, signature = signatures[item.key]
                records = {BUNDLE_SHA256_PAX: sha256, SIGNATURE_PAX: signature}
            else:
                records = {BUNDLE_SHA256_PAX: hashlib.sha256(data).hexdigest()}
            if item.key in compile_times:
                records[BUNDLE_COMPILE_TIME_PAX] = str(compile_times[item.key])
            sent[item.key] = len(data)
            yield member_header(item.key, len(data), records=records)
            yield data
            if len(data) % BLOCK:
                yield padding(len(data))
            progress.advance(nbytes=len(data))
        yield END

    answer = api.put_entries(namespace, stream, deadline, uploader=uploader)
    for member in answer.get("results", []):
        key, status = str(member.get("key")), int(member.get("status", 0))
        if status == 201:
            result.stored += 1
            result.bytes += sent.get(key, 0)
        elif status == 200:
            result.already_present += 1
        elif status == 409:
            result.conflicts += 1
        elif status == 403:  # the namespace requires a signature this job cannot give: not retried
            result.refused.append(key)
            result.errors.append(f"{key}: {member.get('detail') or member.get('error')}")
            continue
        else:
            result.retry.append(key)
            result.errors.append(f"{key}: {member.get('detail') or member.get('error')}")
            continue
        result.done.append(key)
        progress.advance(entries=1)
