"""``warm()``: make this job's local compilation cache hold every executable earlier jobs compiled, then
upload what this job compiles.

Steps: pick the framework (:mod:`client.frameworks`) and fingerprint its runtime -> namespace; lock the
namespace's cache directory; register the namespace; fetch the manifest; download what the directory
lacks (verified, checked by the framework, renamed into place); point the framework's persistent cache at
the directory; start the background uploader. Everything that talks to the server runs in a worker thread
the caller waits for at most ``timeout`` seconds: whatever the server does (refuse, hang, fail, send
garbage), ``warm`` returns within the timeout with one warning, and training goes on with the local cache.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from client.api import CacheApi, normalize_server
from client.cachedir import LocalFile, remove_temp_files, scan, write_fingerprint
from client.config import ClientConfig, namespace_dir
from client.deadline import Deadline
from client.dirlock import DirLock
from client.errors import ClientError, ServerError, ServerProblem, ServerUnavailable
from client.fingerprint import namespace_id
from client.follower import Follower
from client.frameworks import AUTO, Framework, choose
from client.progress import Progress
from client.transfer import DownloadResult, download, split_present
from client.uploader import Uploader, UploadReport

__all__ = ["WarmCounts", "WarmReport", "flush", "stop", "warm"]

logger = logging.getLogger("xla_cache")

# The worker stops itself this much before the caller's hard bound, so its own, more precise reason
# ("did not answer the manifest request in time") is the one reported.
_WORKER_MARGIN = 0.2


@dataclass(kw_only=True)
class WarmCounts:
    """What the conversation with the server found and fetched."""

    manifest_entries: int = 0
    downloaded_entries: int = 0
    downloaded_bytes: int = 0
    present_entries: int = 0  # already in the directory with the right size and SHA-256
    present_bytes: int = 0


@dataclass(kw_only=True)
class WarmReport(WarmCounts):
    """What :func:`warm` did."""

    namespace: str
    framework: str
    cache_dir: str  # the directory the framework's persistent cache uses
    server: str | None
    seconds: float = 0.0  # the whole call, including importing the framework and starting its runtime
    server_seconds: float = 0.0  # the server conversation alone: what the timeout bounds
    errors: list[str] = field(default_factory=list)
    removed_entries: int = 0  # local entries the framework could not load, removed so it writes them again
    initialized: bool = False  # the framework's persistent cache points at cache_dir
    uploading: bool = False  # the background uploader runs
    following: bool = False  # the background follower fetches what other jobs store meanwhile
    feed_cursor: int | None = None  # with follow: the change feed's position before the manifest
    fingerprint: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    def summary(self) -> str:
        """The one log line."""
        text = (
            f"xla-cache warm: {self.framework} namespace {self.namespace}: {self.downloaded_entries} entries "
            f"({self.downloaded_bytes} bytes) downloaded, {self.present_entries} already present, "
            f"{self.seconds:.2f} s ({self.server_seconds:.2f} s with the server), cache dir {self.cache_dir}"
        )
        if self.errors:
            text += f", {len(self.errors)} errors"
        return text


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """Everything one warm needs to know, resolved before any work starts."""

    config: ClientConfig
    framework: Framework
    fingerprint: dict[str, Any]
    namespace: str
    directory: Path
    labels: dict[str, str]
    max_bytes: int | None
    upload: bool
    timeout: float
    progress: Progress | None
    register: bool = True  # register the namespace with the fingerprint (not when it was named outright)
    follow: bool = False  # take the change feed's cursor before the manifest, to follow from it


@dataclass
class _Synced:
    """What the worker thread learnt from the server; read by the caller once the worker is done."""

    counts: WarmCounts = field(default_factory=WarmCounts)
    on_server: set[str] = field(default_factory=set)  # local keys the server is known to hold
    errors: list[str] = field(default_factory=list)
    unavailable: bool = False
    read_only: bool = False
    feed_cursor: int | None = None  # where following starts (taken before the manifest)
    downloading: DownloadResult = field(default_factory=DownloadResult)  # filled as entries are placed


def _sync(
    plan: _Plan, api: CacheApi, deadline: Deadline, cancel: threading.Event, synced: _Synced
) -> _Synced:
    """Register the namespace and download what the directory lacks (in the worker thread), into
    ``synced``: the caller reads it when this returns, or what it holds so far when the time is up."""
    counts = synced.counts
    lock = DirLock(plan.directory)
    try:
        if not lock.acquire(deadline.remaining()):
            holder = lock.holder_pid()
            synced.errors.append(
                f"another process{f' (pid {holder})' if holder else ''} is warming {plan.directory}; "
                f"gave up waiting after {deadline.seconds:g} s"
            )
            return synced
        remove_temp_files(plan.directory)
        try:
            if plan.register:
                api.register_namespace(plan.namespace, plan.fingerprint, plan.labels, deadline)
        except ServerError as exc:
            if exc.status == 403:  # a read-only token: warming works, registering and uploading do not
                synced.read_only = True
                synced.errors.append(f"{exc.reason}; with this token the job warms but uploads nothing")
            elif exc.status >= 500:  # a busy or failing index: the namespace may well be there already
                synced.errors.append(f"could not register the namespace ({exc.reason}); warming anyway")
            else:
                raise
        if plan.follow:
            try:  # before the manifest: what is stored from now on, the follower fetches
                synced.feed_cursor = api.feed(plan.namespace, None, 0.0, deadline).cursor
            except ServerError as exc:
                if exc.status not in (404, 405):
                    raise
                synced.errors.append("this server has no change feed (an older version): not following")
        manifest = api.manifest(plan.namespace, deadline, max_bytes=plan.max_bytes)
        counts.manifest_entries = len(manifest.entries)
        present, needed = split_present(manifest.entries, plan.directory, plan.framework.is_entry)
        counts.present_entries = len(present)
        counts.present_bytes = sum(entry.size for entry in present)
        with synced.downloading.lock:  # the caller may read it while this runs (on a timeout)
            synced.on_server.update(entry.key for entry in present)
        if cancel.is_set() or not needed:
            return synced
        result = download(
            api,
            plan.namespace,
            needed,
            plan.directory,
            deadline,
            progress=plan.progress,
            cancel=cancel,
            check=plan.framework.entry_problem,
            result=synced.downloading,
            bundle_streams=manifest.bundle_streams,
        )
        counts.downloaded_entries = result.entries
        counts.downloaded_bytes = result.bytes
        with synced.downloading.lock:
            synced.on_server.update(result.keys)
        synced.errors.extend(result.errors)
        synced.unavailable = bool(result.errors) and cancel.is_set()
    except ServerProblem as exc:
        synced.errors.append(exc.reason)
        synced.unavailable = isinstance(exc, ServerUnavailable)
    except OSError as exc:
        synced.errors.append(f"cannot use the cache directory {plan.directory} ({exc})")
    finally:
        lock.release()
    return synced


def _talk(plan: _Plan, api: CacheApi) -> tuple[_Synced, float]:
    """Run :func:`_sync` in a worker thread for at most the plan's timeout; returns it and the seconds.

    A warm cut short by the timeout still reports every entry it placed (and what it found present)."""
    cancel = threading.Event()
    deadline = Deadline(max(0.0, plan.timeout - min(_WORKER_MARGIN, plan.timeout / 10)))
    synced = _Synced()
    done = threading.Event()

    def work() -> None:
        try:
            _sync(plan, api, deadline, cancel, synced)
        except Exception as exc:  # a bug, not the server: report it as what it is, not as a timeout
            synced.errors.append(f"the warm failed: {type(exc).__name__}: {exc}")
        finally:
            done.set()

    worker = threading.Thread(target=work, name="xla-cache-warm", daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(max(0.0, plan.timeout))
    seconds = round(time.monotonic() - started, 3)
    if done.is_set():
        return synced, seconds
    cancel.set()
    server = normalize_server(plan.config.server or "")
    late = _Synced(errors=[f"{server} did not finish the warm within the {plan.timeout:g} s timeout"])
    late.unavailable = True
    placed = synced.downloading
    with placed.lock:  # an entry is counted once it is in place: these are all on disk
        late.counts = replace(synced.counts, downloaded_entries=placed.entries, downloaded_bytes=placed.bytes)
        late.on_server = synced.on_server | set(placed.keys)
    return late, seconds


def _summarize(errors: list[str], limit: int = 3) -> str:
    unique = list(dict.fromkeys(errors))
    text = "; ".join(unique[:limit])
    if len(unique) > limit:
        text += f"; and {len(unique) - limit} more"
    return text


_SETTLED_SECONDS = 60.0  # an entry file untouched this long is not being written by anyone


def _remove_unloadable(plan: _Plan, on_server: set[str]) -> int:
    """Remove local entries the framework could not load, so that it writes them again.

    Only in the process that writes the cache (the others may share its directory on one host), never an
    entry the server vouched for, and never a file modified in the last minute (it may be being written).
    """
    if not plan.framework.uploads_here():
        return 0
    removed = 0
    settled = time.time() - _SETTLED_SECONDS
    for item in scan(plan.directory, plan.framework.is_entry, skip=on_server).values():
        if item.mtime_ns / 1e9 > settled:
            continue
        problem = plan.framework.entry_problem(item.path)
        if problem is not None:
            logger.warning(
                "xla-cache: removing %s so that %s writes it again: %s",
                item.path,
                plan.framework.name,
                problem,
            )
            with contextlib.suppress(FileNotFoundError):
                item.path.unlink()
            removed += 1
    return removed


class _Process:
    """This process's warm and uploader: the framework's cache directory is one per process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Warms that initialize the cache take turns; a warm of the directory already in use (another rank
        # thread of this process) returns that warm's report.
        self.warm_lock = threading.Lock()
        self.uploader: Uploader | None = None
        self.follower: Follower | None = None
        self.api: CacheApi | None = None
        self.initialized: WarmReport | None = None
        self._exit_handler = False

    def replace_uploader(
        self, uploader: Uploader | None, api: CacheApi | None, follower: Follower | None = None
    ) -> None:
        with self.lock:
            old, old_api, old_follower = self.uploader, self.api, self.follower
            self.uploader, self.api, self.follower = uploader, api, follower
            if not self._exit_handler:
                atexit.register(self.at_exit)
                self._exit_handler = True
        if old_follower is not None:
            old_follower.stop()
        if old is not None:
            old.stop()
            old.flush()
        if old_api is not None and old_api is not api:
            old_api.close()

    def stop(self, *, flush: bool) -> UploadReport:
        """Stop the uploader (uploading what is complete first if ``flush``); forget this process's warm."""
        with self.lock:
            uploader, api, follower = self.uploader, self.api, self.follower
            self.uploader, self.api, self.follower, self.initialized = None, None, None, None
        if follower is not None:
            follower.stop()
        report = UploadReport()
        if uploader is not None:
            uploader.stop()
            report = uploader.flush() if flush else uploader.report()
        if api is not None:
            api.close()
        return report

    def at_exit(self) -> None:
        follower, uploader = self.follower, self.uploader
        if follower is not None:
            follower.stop(timeout=1.0)  # a daemon thread: what it has not finished, it leaves
        if uploader is None:
            return
        uploader.stop()
        report = uploader.flush(at_exit=True)
        if report.uploaded:
            logger.info(
                "xla-cache: uploaded %d new entries (%d bytes) to namespace %s",
                report.uploaded,
                report.bytes,
                uploader.namespace,
            )


_PROCESS = _Process()
FOLLOW_UPLOAD_INTERVAL = 0.25  # seconds between the uploader's scans while following


def flush(timeout: float | None = None) -> UploadReport:
    """Upload every complete new entry now (at most ``timeout`` seconds; default: warm's timeout).

    Returns the uploader's running totals; an empty report when :func:`warm` started no uploader.
    """
    uploader = _PROCESS.uploader
    if uploader is None:
        return UploadReport()
    return uploader.flush(timeout)


def stop(*, flush: bool = True) -> UploadReport:
    """Stop uploading (after uploading what is complete, unless ``flush`` is False); returns the totals.

    A later :func:`warm` in this process starts afresh.
    """
    return _PROCESS.stop(flush=flush)


def warm(
    server: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    framework: str = AUTO,
    token: str | None = None,
    max_bytes: int | None = None,
    upload: bool = True,
    timeout: float = 30.0,
    initialize: bool = True,
    all_compilations: bool = True,
    fingerprint: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    namespace: str | None = None,
    follow: bool = False,
) -> WarmReport:
    """Warm the framework's local persistent compilation cache from the server, then upload what this job
    compiles.

    Call it once at job start, before the first compilation (torch_xla: after
    ``torch_xla.runtime.use_spmd()`` if the job uses SPMD). ``framework`` is ``"torch_xla"``, ``"jax"`` or
    ``"auto"`` (the one the job imported, else the one installed; torch_xla first). ``server``, ``token``
    and ``cache_dir`` default to ``XLA_CACHE_SERVER``, ``XLA_CACHE_TOKEN`` and ``XLA_CACHE_DIR``
    (:mod:`client.config`). The framework's cache directory is ``<cache_dir>/<namespace>``.

    Server trouble never raises: it costs at most ``timeout`` seconds and one warning, and is listed in the
    report's ``errors``. Raises :class:`~client.errors.CacheAlreadyInitialized` if the framework already
    compiled with its cache set elsewhere (too late), and a :class:`~client.errors.ClientError` if the
    framework cannot be imported.

    ``initialize=False`` only fills the directory (the framework is left alone); ``all_compilations=False``
    keeps the framework's own thresholds for what it caches (JAX skips compilations under a second);
    ``fingerprint`` replaces the live runtime's (for tools preparing a directory for another runtime);
    ``max_bytes`` caps what is downloaded; ``progress`` receives transfer progress. ``namespace`` (with
    ``initialize=False``) fills the directory of that namespace as it is, without fingerprinting the runtime
    or registering anything: ``xla-cache warm --namespace``. ``follow=True`` keeps a background
    :class:`~client.follower.Follower` that fetches each entry other jobs store in the namespace while this
    one runs (and uploads this job's new compilations within a second of being written).
    """
    started = time.monotonic()
    config = ClientConfig.resolve(server, token, cache_dir)
    adapter = choose(str(fingerprint.get("framework", framework)) if fingerprint is not None else framework)
    if framework == AUTO and fingerprint is None:
        logger.info("xla-cache: framework auto: %s (imported, or else installed)", adapter.name)
    if not initialize:
        if namespace is not None:
            fp = dict(fingerprint or {})
            plan = replace(
                _plan(config, adapter, fp, labels, max_bytes, upload, timeout, progress, follow),
                namespace=namespace,
                directory=namespace_dir(config.cache_dir, namespace),
                register=False,
            )
            return _warm(plan, started, initialize=False, all_compilations=all_compilations)
        fp = dict(fingerprint) if fingerprint is not None else adapter.fingerprint()
        plan = replace(
            _plan(config, adapter, fp, labels, max_bytes, upload, timeout, progress), follow=follow
        )
        return _warm(plan, started, initialize=False, all_compilations=all_compilations)
    if namespace is not None:
        raise ClientError("warm(namespace=...) only fills a directory: pass initialize=False")

    adapter.require()
    with _PROCESS.warm_lock:
        fp = dict(fingerprint) if fingerprint is not None else adapter.fingerprint()
        plan = replace(
            _plan(config, adapter, fp, labels, max_bytes, upload, timeout, progress), follow=follow
        )
        earlier = _PROCESS.initialized
        if earlier is not None and earlier.cache_dir == str(plan.directory):
            # Several rank threads of one process (xmp.spawn on CPU/GPU) share one cache directory.
            logger.info("xla-cache: %s is already warmed and in use in this process", earlier.cache_dir)
            return earlier
        adapter.check_not_too_late(plan.directory)
        report = _warm(plan, started, initialize=True, all_compilations=all_compilations)
        _PROCESS.initialized = report
        return report


def _plan(
    config: ClientConfig,
    adapter: Framework,
    fp: dict[str, Any],
    labels: Mapping[str, str] | None,
    max_bytes: int | None,
    upload: bool,
    timeout: float,
    progress: Progress | None,
    follow: bool = False,
) -> _Plan:
    namespace = namespace_id(fp)
    return _Plan(
        config=config,
        framework=adapter,
        fingerprint=fp,
        namespace=namespace,
        directory=namespace_dir(config.cache_dir, namespace),
        labels=dict(labels or {}),
        max_bytes=max_bytes,
        upload=upload,
        timeout=timeout,
        progress=progress,
        follow=follow,
    )


def _warm(plan: _Plan, started: float, *, initialize: bool, all_compilations: bool) -> WarmReport:
    local_errors: list[str] = []
    try:
        plan.directory.mkdir(parents=True, exist_ok=True)
        if plan.fingerprint and namespace_id(plan.fingerprint) == plan.namespace:  # for xla-cache push
            write_fingerprint(plan.directory, plan.fingerprint)
    except OSError as exc:  # a full disk, say: fail open like for any server trouble
        local_errors.append(f"cannot write into the cache directory {plan.directory} ({exc})")
    server = normalize_server(plan.config.server) if plan.config.server else None
    api: CacheApi | None = None
    synced = _Synced()
    server_seconds = 0.0
    if plan.config.server:
        api = CacheApi(plan.config.server, plan.config.token)
        # The bound covers the server conversation only: importing the framework and starting its runtime
        # are costs the job pays anyway.
        synced, server_seconds = _talk(plan, api)
    else:
        logger.info("xla-cache: no server configured (XLA_CACHE_SERVER); using the local cache only")

    report = WarmReport(
        **asdict(synced.counts),
        namespace=plan.namespace,
        framework=plan.framework.name,
        cache_dir=str(plan.directory),
        server=server,
        server_seconds=server_seconds,
        errors=[*local_errors, *synced.errors],
        fingerprint=plan.fingerprint,
        feed_cursor=synced.feed_cursor,
    )
    if report.errors:
        logger.warning(
            "xla-cache: trouble with namespace %s on %s: %s; training continues with the local cache "
            "(%d entries)",
            plan.namespace,
            report.server,
            _summarize(report.errors),
            len(scan(plan.directory, plan.framework.is_entry)),
        )
    report.removed_entries = _remove_unloadable(plan, synced.on_server)

    if initialize:
        plan.framework.initialize(plan.directory, all_compilations=all_compilations)
        report.initialized = True
        known: dict[str, LocalFile] = {
            key: item
            for key, item in scan(plan.directory, plan.framework.is_entry).items()
            if key in synced.on_server
        }
        uploading = plan.upload and api is not None and not synced.read_only and plan.framework.uploads_here()
        uploader = Uploader(
            api if uploading else None,
            plan.namespace,
            plan.directory,
            framework=plan.framework,
            fingerprint=plan.fingerprint,
            known=known,
            timeout=plan.timeout,
            server_failed=bool(report.errors),
            last_failure_unavailable=synced.unavailable,
            # Following: each new compilation goes up within about half a second of being written.
            **({"interval": FOLLOW_UPLOAD_INTERVAL, "settle": FOLLOW_UPLOAD_INTERVAL} if plan.follow else {}),
        )
        uploader.start()
        follower = None
        if plan.follow and api is not None and synced.feed_cursor is not None:
            follower = Follower(
                api, plan.namespace, plan.directory, synced.feed_cursor, check=plan.framework.entry_problem
            )
            follower.start()
        _PROCESS.replace_uploader(uploader, api, follower)
        report.uploading = uploading
        report.following = follower is not None
    elif api is not None:
        api.close()

    report.seconds = round(time.monotonic() - started, 3)
    logger.info(report.summary())
    return report
