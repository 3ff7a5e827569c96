"""Moving entries between the server and the cache directory.

Download: entries already on disk with the manifest's size and SHA-256 are kept; small entries come in
bundles (tar streams, the fast path for many small graphs), large ones as parallel single GETs (faster for
a few big executables), in at most as many bundles as the server has worker processes (its manifest says;
:data:`DOWNLOAD_WORKERS` at most): bundles beyond that share one process's CPU. Measured on a 2-core
machine with a one-worker server on it: 2,000 entries of 5-60 kB took 0.33 s as one bundle and 0.50 s as
four. Every file is verified before it is renamed into place.

Upload: ask ``missing`` first, then stream each lacking entry with its digest (and compile time).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from cache_protocol import BUNDLE_COMPILE_TIME_PAX, BUNDLE_SHA256_PAX
from cache_protocol.signing import SIGNATURE_PAX
from cache_protocol.tar import BLOCK, END, member_header, padding
from xla_cache.api import MAX_KEYS_PER_REQUEST, CacheApi, RemoteEntry
from xla_cache.bundle import extract_bundle
from xla_cache.cachedir import (
    CHUNK,
    EntryCheck,
    LocalFile,
    VerifiedWriter,
    file_sha256,
    fsync_directory,
    is_entry_name,
    scan,
)
from xla_cache.deadline import Deadline
from xla_cache.errors import ClientError, ServerError, ServerProblem, ServerUnavailable
from xla_cache.progress import NullProgress, Progress
from xla_cache.trust import EntryTrust

__all__ = [
    "BUNDLE_MAX_BYTES",
    "BUNDLE_MIN_ENTRIES",
    "DOWNLOAD_WORKERS",
    "LARGE_ENTRY_BYTES",
    "DownloadOptions",
    "DownloadResult",
    "FileChanged",
    "UploadResult",
    "download",
    "split_present",
    "upload_entries",
    "upload_file",
]

LARGE_ENTRY_BYTES = 8 * 1024 * 1024  # entries at least this big are fetched with their own GET
DOWNLOAD_WORKERS = 4  # requests at once (bundles, fewer if the server's manifest says so, and large GETs)
BUNDLE_MAX_BYTES = 256 * 1024 * 1024  # one bundle stream carries at most about this much
BUNDLE_MIN_ENTRIES = 250  # below this many entries per stream, one more stream is not worth a request


class FileChanged(ClientError):
    """An entry file changed while it was being uploaded (it is retried later)."""


def split_present(
    manifest: list[RemoteEntry], directory: Path, is_entry: Callable[[str], bool] = is_entry_name
) -> tuple[list[RemoteEntry], list[RemoteEntry]]:
    """Split the manifest into entries already on disk (same size and SHA-256) and entries to fetch."""
    local = scan(directory, is_entry)
    present: list[RemoteEntry] = []
    needed: list[RemoteEntry] = []
    for entry in manifest:
        found = local.get(entry.key)
        if found is not None and found.size == entry.size:
            try:
                if file_sha256(found.path) == entry.sha256:
                    present.append(entry)
                    continue
            except OSError:
                pass
        needed.append(entry)
    return present, needed


@dataclass
class DownloadResult:
    """What a download brought, and why anything failed."""

    entries: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class DownloadOptions:
    """How one download runs: by when, checked how, reported where; all but ``deadline`` have defaults."""

    deadline: Deadline
    check: EntryCheck | None = None  # the framework's: it must pass before an entry is placed
    progress: Progress | None = None
    cancel: threading.Event | None = None  # once set, nothing more is started or placed
    on_placed: Callable[[RemoteEntry], None] | None = None  # each entry once it is in place (any thread)
    bundle_streams: int | None = None  # bundles at once, as the manifest says (None: DOWNLOAD_WORKERS)
    trust: EntryTrust | None = None  # with trusted keys: only entries they signed are placed


def _plan(needed: list[RemoteEntry], large_entry_bytes: int, streams: int) -> list[list[RemoteEntry]]:
    """Group entries: each large entry alone (a GET); the small ones in up to ``streams`` bundles of about
    equal size (at least BUNDLE_MIN_ENTRIES entries each), none over the key or byte limit of one request.

    Small entries whose copies share a pack on the server are kept next to each other (in the order of the
    pack's most useful entry), so that each bundle reads few packs instead of every bundle reading each."""
    jobs: list[list[RemoteEntry]] = [[entry] for entry in needed if entry.size >= large_entry_bytes]
    small = [entry for entry in needed if entry.size < large_entry_bytes]
    small = _packs_together(small)
    if not small:
        return jobs
    parts = max(1, min(streams, len(small) // BUNDLE_MIN_ENTRIES))
    target = -(-sum(entry.size for entry in small) // parts)  # bytes per bundle, rounded up
    batches: list[list[RemoteEntry]] = []
    batch: list[RemoteEntry] = []
    batch_bytes = 0
    for entry in small:
        full = len(batch) >= MAX_KEYS_PER_REQUEST or batch_bytes + entry.size > BUNDLE_MAX_BYTES
        # the last of the ``parts`` bundles takes the rest, unless a request's limits say otherwise
        if batch and (full or (len(batches) < parts - 1 and batch_bytes + entry.size > target)):
            batches.append(batch)
            batch, batch_bytes = [], 0
        batch.append(entry)
        batch_bytes += entry.size
    if batch:
        batches.append(batch)
    return jobs + batches


def _packs_together(entries: list[RemoteEntry]) -> list[RemoteEntry]:
    """``entries`` with those of one pack moved up next to the first of them (an entry without a pack stays
    where it is, relative to the rest)."""
    first: dict[str, int] = {}
    ranks = [first.setdefault(e.pack, i) if e.pack is not None else i for i, e in enumerate(entries)]
    order = sorted(range(len(entries)), key=lambda i: (ranks[i], i))
    return [entries[i] for i in order]


def download(
    api: CacheApi, namespace: str, needed: list[RemoteEntry], directory: Path, options: DownloadOptions
) -> DownloadResult:
    """Fetch ``needed`` into ``directory``; never raises for server trouble (it lands in ``errors``).

    Entries of at least :data:`LARGE_ENTRY_BYTES` come by single GETs, the rest in at most
    ``options.bundle_streams`` bundles; at most :data:`DOWNLOAD_WORKERS` requests run at once. Each job (a
    GET or a bundle) returns what it placed; the result adds them up.
    """
    workers = DOWNLOAD_WORKERS
    fetch = _Fetch(api, namespace, directory, options)
    fetch.progress.start("download", len(needed), sum(entry.size for entry in needed))
    result = DownloadResult()
    try:
        jobs = _plan(needed, fetch.large, min(workers, options.bundle_streams or workers))
        if options.trust is not None:  # checked while they download, in the order they are asked for
            options.trust.check_ahead([entry for job in jobs for entry in job])
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs) or 1))) as pool:
            for placed, errors in pool.map(fetch.run, jobs):
                result.entries += len(placed)
                result.bytes += sum(entry.size for entry in placed)
                result.keys += [entry.key for entry in placed]
                result.errors += errors
        if result.entries:
            fsync_directory(directory)
    finally:
        fetch.progress.close()
    return result


class _Fetch:
    """One download's jobs: each fetches a single large entry or a bundle and returns the entries it placed
    and its errors. Server trouble that would only make the other jobs wait sets ``cancel``."""

    def __init__(self, api: CacheApi, namespace: str, directory: Path, options: DownloadOptions) -> None:
        self.api, self.namespace, self.directory, self.options = api, namespace, directory, options
        self.large = LARGE_ENTRY_BYTES  # read at each download (tests lower it)
        self.progress: Progress = options.progress or NullProgress()
        self.cancel = options.cancel or threading.Event()

    def stopped(self) -> bool:
        return self.cancel.is_set() or self.options.deadline.expired()

    def run(self, job: list[RemoteEntry]) -> tuple[list[RemoteEntry], list[str]]:
        """Fetch one job (a large entry alone by a GET, else a bundle): the entries placed, the errors."""
        placed: list[RemoteEntry] = []  # filled as entries land, so a failure midway still counts them
        if self.stopped():
            return placed, []
        try:
            if len(job) == 1 and job[0].size >= self.large:
                self._one(job[0], placed)
                return placed, []
            return placed, self._bundle(job, placed)
        except ServerProblem as exc:
            if isinstance(exc, ServerUnavailable):
                self.cancel.set()  # the server is gone or too slow: the other jobs would only wait too
            return placed, [exc.reason]
        except OSError as exc:
            self.cancel.set()
            return placed, [f"cannot write into {self.directory} ({exc})"]

    def _one(self, entry: RemoteEntry, placed: list[RemoteEntry]) -> None:
        if self.options.trust is not None and not self.options.trust.allows(entry):
            return  # not fetched at all
        size, sha256, check = entry.size, entry.sha256, self.options.check
        with (
            self.api.entry(self.namespace, entry.key, self.options.deadline) as (_, chunks),
            VerifiedWriter(self.directory, entry.key, size=size, sha256=sha256, check=check) as writer,
        ):
            for chunk in chunks:
                if self.cancel.is_set():
                    return
                writer.write(chunk)
                self.progress.advance(nbytes=len(chunk))
            writer.commit()
        self._placed(entry, placed)

    def _bundle(self, entries: list[RemoteEntry], placed: list[RemoteEntry]) -> list[str]:
        wanted = {entry.key: entry for entry in entries}
        with self.api.bundle(self.namespace, list(wanted), self.options.deadline) as (_, chunks):
            outcome = extract_bundle(
                chunks,
                wanted,
                self.directory,
                on_bytes=lambda count: self.progress.advance(nbytes=count),
                on_entry=lambda entry: self._placed(entry, placed),
                should_stop=self.stopped,
                check=self.options.check,
                trust=self.options.trust,
            )
        return outcome.errors

    def _placed(self, entry: RemoteEntry, placed: list[RemoteEntry]) -> None:
        placed.append(entry)
        if self.options.on_placed is not None:
            self.options.on_placed(entry)  # first: a caller that stops waiting counts it
        self.progress.advance(entries=1)


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
) -> UploadResult:
    """Ask which of ``files`` the server lacks, then upload those. Server trouble raises ServerProblem
    only for the ``missing`` question; a failed upload of one entry is recorded and the others continue."""
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
                api, namespace, item, deadline, compile_time_ms=compile_times.get(item.key), progress=progress
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
                    _send_bulk(api, namespace, group, deadline, compile_times, result, progress)
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

    answer = api.put_entries(namespace, stream, deadline)
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
