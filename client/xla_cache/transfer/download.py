"""Downloading entries from the server into a cache directory.

Entries already on disk with the manifest's size and SHA-256 are kept; small entries come in bundles (tar
streams, the fast path for many small graphs), large ones as parallel single GETs (faster for a few big
executables), in at most as many bundles as the server has worker processes (its manifest says;
:data:`DOWNLOAD_WORKERS` at most): bundles beyond that share one process's CPU. Measured on a 2-core machine
with a one-worker server on it: 2,000 entries of 5-60 kB took 0.33 s as one bundle and 0.50 s as four.
Every file is verified before it is renamed into place. Uploading is :mod:`xla_cache.transfer.upload`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from xla_cache.errors import ServerProblem, ServerUnavailable
from xla_cache.http.api import MAX_KEYS_PER_REQUEST, CacheApi, RemoteEntry
from xla_cache.http.deadline import Deadline
from xla_cache.localcache.cachedir import (
    EntryCheck,
    VerifiedWriter,
    file_sha256,
    fsync_directory,
    is_entry_name,
    scan,
)
from xla_cache.transfer.bundle import extract_bundle
from xla_cache.transfer.progress import NullProgress, Progress
from xla_cache.transfer.trust import EntryTrust

__all__ = [
    "BUNDLE_MAX_BYTES",
    "BUNDLE_MIN_ENTRIES",
    "DOWNLOAD_WORKERS",
    "LARGE_ENTRY_BYTES",
    "DownloadOptions",
    "DownloadResult",
    "download",
    "split_present",
]

LARGE_ENTRY_BYTES = 8 * 1024 * 1024  # entries at least this big are fetched with their own GET
DOWNLOAD_WORKERS = 4  # requests at once (bundles, fewer if the server's manifest says so, and large GETs)
BUNDLE_MAX_BYTES = 256 * 1024 * 1024  # one bundle stream carries at most about this much
BUNDLE_MIN_ENTRIES = 250  # below this many entries per stream, one more stream is not worth a request


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
