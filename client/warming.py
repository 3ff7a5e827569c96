"""``warm()``: make this job's local torch_xla cache hold every graph earlier jobs compiled, then upload.

Steps: fingerprint the runtime -> namespace; lock the namespace's cache directory; register the namespace;
fetch the manifest; download what the directory lacks (verified, renamed into place); point torch_xla's
persistent cache at the directory; start the background uploader. Everything that talks to the server runs
in a worker thread the caller waits for at most ``timeout`` seconds: whatever the server does (refuse,
hang, fail, send garbage), ``warm`` returns within the timeout with one warning, and training goes on with
the local cache.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from client.api import CacheApi, normalize_server
from client.cachedir import LocalFile, remove_temp_files, scan, write_fingerprint
from client.deadline import Deadline
from client.dirlock import DirLock
from client.errors import ServerError, ServerProblem, ServerUnavailable
from client.fingerprint import collect_fingerprint, namespace_id
from client.progress import Progress
from client.transfer import download, split_present
from client.uploader import Uploader, UploadReport
from client.xla_runtime import check_not_too_late, initialize_cache, require_torch_xla

__all__ = ["WarmReport", "default_cache_dir", "flush", "namespace_dir", "warm"]

logger = logging.getLogger("xla_cache")

# The worker stops itself this much before the caller's hard bound, so its own, more precise reason
# ("did not answer the manifest request in time") is the one reported.
_WORKER_MARGIN = 0.2


def default_cache_dir() -> Path:
    """``$XLA_CACHE_DIR``, else ``$XDG_CACHE_HOME/xla-cache``, else ``~/.cache/xla-cache``."""
    configured = os.environ.get("XLA_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "xla-cache"


def namespace_dir(cache_dir: Path | str, namespace: str) -> Path:
    """The directory torch_xla uses for one namespace: ``<cache_dir>/<namespace>``.

    One directory per namespace keeps entries of different runtimes apart on disk too: without SPMD each
    process has its own namespace (the process index is in the fingerprint), so its own directory.
    """
    return Path(cache_dir) / namespace


@dataclass
class WarmReport:
    """What :func:`warm` did."""

    namespace: str
    cache_dir: str  # the directory torch_xla's persistent cache uses
    server: str | None
    manifest_entries: int = 0
    downloaded_entries: int = 0
    downloaded_bytes: int = 0
    present_entries: int = 0  # already in the directory with the right size and SHA-256
    present_bytes: int = 0
    seconds: float = 0.0  # the whole call, including importing torch_xla and starting its runtime
    server_seconds: float = 0.0  # the server conversation alone: what the timeout bounds
    errors: list[str] = field(default_factory=list)
    initialized: bool = False  # torch_xla's persistent cache points at cache_dir
    uploading: bool = False  # the background uploader runs
    fingerprint: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    def summary(self) -> str:
        """The one log line."""
        text = (
            f"xla-cache warm: namespace {self.namespace}: {self.downloaded_entries} entries "
            f"({self.downloaded_bytes} bytes) downloaded, {self.present_entries} already present, "
            f"{self.seconds:.2f} s ({self.server_seconds:.2f} s with the server), cache dir {self.cache_dir}"
        )
        if self.errors:
            text += f", {len(self.errors)} errors"
        return text


@dataclass
class _Outcome:
    manifest_entries: int = 0
    downloaded_entries: int = 0
    downloaded_bytes: int = 0
    present_entries: int = 0
    present_bytes: int = 0
    on_server: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    unavailable: bool = False
    read_only: bool = False


def _sync(
    api: CacheApi,
    namespace: str,
    fingerprint: Mapping[str, Any],
    labels: Mapping[str, str],
    directory: Path,
    deadline: Deadline,
    max_bytes: int | None,
    progress: Progress | None,
    cancel: threading.Event,
    outcome: _Outcome,
) -> None:
    lock = DirLock(directory)
    try:
        if not lock.acquire(deadline.remaining()):
            holder = lock.holder_pid()
            outcome.errors.append(
                f"another process{f' (pid {holder})' if holder else ''} is warming {directory}; "
                f"gave up waiting after {deadline.seconds:g} s"
            )
            return
        remove_temp_files(directory)
        try:
            api.register_namespace(namespace, fingerprint, labels, deadline)
        except ServerError as exc:
            if exc.status != 403:
                raise
            # A read-only token: warming works, registering and uploading do not.
            outcome.read_only = True
            outcome.errors.append(f"{exc.reason}; with this token the job warms but uploads nothing")
        manifest = api.manifest(namespace, deadline, max_bytes=max_bytes)
        outcome.manifest_entries = len(manifest)
        present, needed = split_present(manifest, directory)
        outcome.present_entries = len(present)
        outcome.present_bytes = sum(entry.size for entry in present)
        outcome.on_server.update(entry.key for entry in present)
        if cancel.is_set() or not needed:
            return
        result = download(api, namespace, needed, directory, deadline, progress=progress, cancel=cancel)
        outcome.downloaded_entries = result.entries
        outcome.downloaded_bytes = result.bytes
        outcome.on_server.update(result.keys)
        outcome.errors.extend(result.errors)
        if result.errors and cancel.is_set():
            outcome.unavailable = True
    except ServerProblem as exc:
        outcome.errors.append(exc.reason)
        outcome.unavailable = isinstance(exc, ServerUnavailable)
    except OSError as exc:
        outcome.errors.append(f"cannot use the cache directory {directory} ({exc})")
    finally:
        lock.release()


def _summarize(errors: list[str], limit: int = 3) -> str:
    unique = list(dict.fromkeys(errors))
    text = "; ".join(unique[:limit])
    if len(unique) > limit:
        text += f"; and {len(unique) - limit} more"
    return text


class _State:
    lock = threading.Lock()
    uploader: Uploader | None = None
    api: CacheApi | None = None
    atexit_registered = False
    # torch_xla's cache directory is one per process: warms that initialize it take turns, and a warm of
    # the directory already in use (another rank thread of this process) returns that warm's report.
    warm_lock = threading.Lock()
    initialized: WarmReport | None = None


def _replace_uploader(uploader: Uploader | None, api: CacheApi | None) -> None:
    with _State.lock:
        old, old_api = _State.uploader, _State.api
        _State.uploader, _State.api = uploader, api
        if not _State.atexit_registered:
            atexit.register(_at_exit)
            _State.atexit_registered = True
    if old is not None:
        old.stop()
        old.flush()
    if old_api is not None and old_api is not api:
        old_api.close()


def _at_exit() -> None:
    uploader = _State.uploader
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


def flush(timeout: float | None = None) -> UploadReport:
    """Upload every complete new entry now (at most ``timeout`` seconds; default: warm's timeout).

    Returns the uploader's running totals; an empty report when :func:`warm` started no uploader.
    """
    uploader = _State.uploader
    if uploader is None:
        return UploadReport()
    return uploader.flush(timeout)


def warm(
    server: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    token: str | None = None,
    max_bytes: int | None = None,
    upload: bool = True,
    timeout: float = 30.0,
    initialize: bool = True,
    fingerprint: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> WarmReport:
    """Warm the local torch_xla persistent cache from the server, then upload what this job compiles.

    Call it once at job start, after ``torch_xla.runtime.use_spmd()`` if the job uses SPMD and before the
    first graph runs. ``server``, ``token`` and ``cache_dir`` default to ``XLA_CACHE_SERVER``,
    ``XLA_CACHE_TOKEN`` and ``XLA_CACHE_DIR``. The cache directory torch_xla uses is
    ``<cache_dir>/<namespace>`` (see :func:`namespace_dir`).

    Server trouble never raises: it costs at most ``timeout`` seconds and one warning, and is listed in the
    report's ``errors``. Raises :class:`~client.errors.CacheAlreadyInitialized` if torch_xla already compiled
    a graph (too late), and :class:`~client.errors.TorchXlaUnavailable` if torch_xla cannot be imported.

    ``initialize=False`` only fills the directory (torch_xla's cache is left alone); ``fingerprint``
    replaces the live runtime's (for tools preparing a directory for another runtime); ``max_bytes`` caps
    what is downloaded; ``progress`` receives transfer progress.
    """
    started = time.monotonic()
    server = server or os.environ.get("XLA_CACHE_SERVER") or None
    token = token or os.environ.get("XLA_CACHE_TOKEN") or None
    base_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if not initialize:
        fp = dict(fingerprint) if fingerprint is not None else collect_fingerprint()
        return _warm(
            started, server, token, base_dir, fp, max_bytes, upload, timeout, False, labels, progress
        )

    require_torch_xla()
    with _State.warm_lock:
        fp = dict(fingerprint) if fingerprint is not None else collect_fingerprint()
        earlier = _State.initialized
        if earlier is not None and earlier.cache_dir == str(namespace_dir(base_dir, namespace_id(fp))):
            # Several rank threads of one process (xmp.spawn on CPU/GPU) share one cache directory.
            logger.info("xla-cache: %s is already warmed and in use in this process", earlier.cache_dir)
            return earlier
        check_not_too_late()
        report = _warm(
            started, server, token, base_dir, fp, max_bytes, upload, timeout, True, labels, progress
        )
        _State.initialized = report
        return report


def _warm(
    started: float,
    server: str | None,
    token: str | None,
    base_dir: Path,
    fp: dict[str, Any],
    max_bytes: int | None,
    upload: bool,
    timeout: float,
    initialize: bool,
    labels: Mapping[str, str] | None,
    progress: Progress | None,
) -> WarmReport:
    namespace = namespace_id(fp)
    directory = namespace_dir(base_dir, namespace)
    directory.mkdir(parents=True, exist_ok=True)
    write_fingerprint(directory, fp)

    report = WarmReport(
        namespace=namespace,
        cache_dir=str(directory),
        server=normalize_server(server) if server else None,
        fingerprint=fp,
    )
    outcome = _Outcome()
    api: CacheApi | None = None
    if server:
        api = CacheApi(server, token)
        cancel = threading.Event()
        worker_deadline = Deadline(max(0.0, timeout - min(_WORKER_MARGIN, timeout / 10)))
        worker = threading.Thread(
            target=_sync,
            args=(
                api,
                namespace,
                fp,
                dict(labels or {}),
                directory,
                worker_deadline,
                max_bytes,
                progress,
                cancel,
                outcome,
            ),
            name="xla-cache-warm",
            daemon=True,
        )
        # The bound covers the server conversation only: importing torch_xla and starting the PJRT
        # client above are costs the job pays anyway.
        talk_started = time.monotonic()
        worker.start()
        worker.join(max(0.0, timeout))
        report.server_seconds = round(time.monotonic() - talk_started, 3)
        if worker.is_alive():
            cancel.set()
            outcome.errors.append(f"{report.server} did not finish the warm within the {timeout:g} s timeout")
            outcome.unavailable = True
    else:
        logger.info("xla-cache: no server configured (XLA_CACHE_SERVER); using the local cache only")

    report.manifest_entries = outcome.manifest_entries
    report.downloaded_entries = outcome.downloaded_entries
    report.downloaded_bytes = outcome.downloaded_bytes
    report.present_entries = outcome.present_entries
    report.present_bytes = outcome.present_bytes
    report.errors = list(outcome.errors)
    if report.errors:
        logger.warning(
            "xla-cache: trouble with namespace %s on %s: %s; training continues with the local cache "
            "(%d entries)",
            namespace,
            report.server,
            _summarize(report.errors),
            len(scan(directory)),
        )

    if initialize:
        initialize_cache(str(directory))
        report.initialized = True
        known: dict[str, LocalFile] = {
            key: item for key, item in scan(directory).items() if key in outcome.on_server
        }
        uploader = Uploader(
            api if upload and not outcome.read_only else None,
            namespace,
            directory,
            known=known,
            timeout=timeout,
            spmd=bool(fp.get("spmd")),
            server_failed=bool(report.errors),
            last_failure_unavailable=outcome.unavailable,
        )
        uploader.start()
        _replace_uploader(uploader, api)
        report.uploading = upload and api is not None and not outcome.read_only
    elif api is not None:
        api.close()

    report.seconds = round(time.monotonic() - started, 3)
    logger.info(report.summary())
    return report
