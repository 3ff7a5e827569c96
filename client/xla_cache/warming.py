"""``warm()``: make this job's local compilation cache hold every executable earlier jobs compiled, then
upload what this job compiles.

It reads straight down: :func:`warm` resolves its arguments once
(:class:`~xla_cache.transfer.plan.WarmOptions`) and plans once, with the real fingerprint, the namespace and
directory it fills (``WarmPlan``); :func:`_warm` prepares the directory, talks to the server
(:func:`xla_cache.transfer.conversation.talk`: lock the directory, register the namespace, fetch the manifest,
download what the directory lacks, verified and checked by the framework), removes entries the framework
cannot load, then points the framework's persistent cache at the directory and starts the background uploader
(and follower), which this process's :class:`_Process` owns from then on. The server conversation runs in a
worker thread the caller waits for at most ``timeout`` seconds: whatever the server does (refuse, hang, fail,
send garbage), ``warm`` returns within the timeout with one warning, and training goes on with the local
cache.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from xla_cache.config import ClientConfig
from xla_cache.errors import ClientError
from xla_cache.frameworks import AUTO, Framework, choose
from xla_cache.http.api import CacheApi
from xla_cache.localcache.cachedir import LastWarm, LocalFile, record_last_warm, scan, write_fingerprint
from xla_cache.logs import logger
from xla_cache.runs import RunReporter, Transfers, WarmFacts, reporter_for
from xla_cache.runs.process import PROCESS, Background
from xla_cache.transfer.conversation import Conversation, talk
from xla_cache.transfer.follower import Follower
from xla_cache.transfer.plan import WarmOptions, WarmPlan
from xla_cache.transfer.progress import Progress
from xla_cache.transfer.uploader import Uploader
from xla_cache.warm_report import WarmReport

__all__ = ["FOLLOW_UPLOAD_INTERVAL", "warm"]


FOLLOW_UPLOAD_INTERVAL = 0.25  # seconds between the uploader's scans while following


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
    and ``cache_dir`` default to ``XLA_CACHE_SERVER``, ``XLA_CACHE_TOKEN`` and ``XLA_CACHE_DIR``, then to the
    config file, then to ``http://127.0.0.1:8080`` and ``~/.cache/xla-cache`` (:mod:`xla_cache.config`).
    The framework's cache directory is ``<cache_dir>/<namespace>``.

    Server trouble never raises: it costs at most ``timeout`` seconds and one warning, and is listed in the
    report's ``errors``. Raises :class:`~xla_cache.errors.CacheAlreadyInitialized` if the framework already
    compiled with its cache set elsewhere (too late), and a :class:`~xla_cache.errors.ClientError` if the
    framework cannot be imported.

    ``initialize=False`` only fills the directory (the framework is left alone); ``all_compilations=False``
    keeps the framework's own thresholds for what it caches (JAX skips compilations under a second);
    ``fingerprint`` replaces the live runtime's (for tools preparing a directory for another runtime);
    ``max_bytes`` caps what is downloaded; ``progress`` receives transfer progress. ``namespace`` (with
    ``initialize=False``) fills the directory of that namespace as it is, without fingerprinting the runtime
    or registering anything: ``xla-cache warm --namespace``. ``follow=True`` keeps a background
    :class:`~xla_cache.transfer.follower.Follower` that fetches each entry other jobs store in the namespace
    while this one runs (and uploads this job's new compilations within a second of being written).
    """
    started = time.monotonic()
    config = ClientConfig.resolve(server, token, cache_dir, flags=WARM_ARGUMENTS)
    options = WarmOptions(
        config=config,
        signer=config.signer(),
        trusted=config.verifier(),
        framework=_framework(framework, fingerprint),
        initialize=initialize,
        all_compilations=all_compilations,
        upload=upload,
        follow=follow,
        timeout=timeout,
        max_bytes=max_bytes,
        labels=dict(labels or {}),
        progress=progress,
    )
    if not initialize:
        return _warm(WarmPlan.make(options, fingerprint, namespace), started)
    if namespace is not None:
        raise ClientError("warm(namespace=...) only fills a directory: pass initialize=False")
    options.framework.require()
    with PROCESS.turn:
        plan = WarmPlan.make(options, fingerprint, None)  # after require(): the runtime can be fingerprinted
        earlier = PROCESS.warmed(plan.directory)
        if earlier is not None:
            # Several rank threads of one process (xmp.spawn on CPU/GPU) share one cache directory.
            logger.info("xla-cache: %s is already warmed and in use in this process", earlier.cache_dir)
            return earlier
        options.framework.check_not_too_late(plan.directory)
        report = _warm(plan, started)
        PROCESS.record(report)
        return report


WARM_ARGUMENTS = {"server": "warm(server=)", "token": "warm(token=)", "cache_dir": "warm(cache_dir=)"}


def _framework(name: str, fingerprint: Mapping[str, Any] | None) -> Framework:
    """The adapter of the given fingerprint's framework, else of ``name``."""
    if fingerprint is not None:
        return choose(str(fingerprint.get("framework", name)))
    adapter = choose(name)
    if name == AUTO:
        logger.info("xla-cache: framework auto: %s (imported, or else installed)", adapter.name)
    return adapter


def _warm(plan: WarmPlan, started: float) -> WarmReport:
    """Prepare the directory, talk to the server, remove what the framework cannot load; when initializing,
    point the framework at the directory and hand the uploader and follower to :data:`PROCESS`."""
    options = plan.options
    local_errors = _prepare(plan)
    api: CacheApi | None = None
    talked, server_seconds = Conversation(), 0.0
    config = options.config
    if config.server:
        # the one place the URL is normalised
        api = CacheApi(config.server, config.token, signer=options.signer, compression=config.compression)
        # The bound covers the server conversation only: importing the framework and starting its runtime
        # are costs the job pays anyway.
        talked, server_seconds = talk(api, plan)
    else:
        source = options.config.sources.get("server")
        logger.info("xla-cache: the server is set to none (%s); using the local cache only", source)
    server = api.server if api is not None else None
    errors = [*local_errors, *talked.errors]
    if errors:
        logger.warning(
            "xla-cache: trouble with namespace %s on %s (%s): %s; training continues with the local cache "
            "(%d entries)",
            plan.namespace,
            server,
            options.config.server_hint(),
            _summarize(errors),
            len(scan(plan.directory, options.framework.is_entry)),
        )
    if talked.unverified:
        logger.warning(
            "xla-cache: skipped %d entries of namespace %s that no trusted key signed (%s; "
            "XLA_CACHE_TRUSTED_KEYS): the job compiles them itself",
            talked.unverified,
            plan.namespace,
            talked.unverified_reasons,
        )
    on_server = talked.on_server()
    removed = _remove_unloadable(plan, on_server)
    background: Background | None = None
    reporter: RunReporter | None = None
    if options.initialize:
        options.framework.initialize(plan.directory, all_compilations=options.all_compilations)
        background = _start_background(plan, api, talked, on_server, failed=bool(errors), unloadable=removed)
        reporter = background.reporter
        PROCESS.run(background)
    elif api is not None:
        api.close()
    report = WarmReport(
        **asdict(talked.counts()),
        namespace=plan.namespace,
        framework=options.framework.name,
        cache_dir=str(plan.directory),
        server=server,
        server_seconds=server_seconds,
        errors=errors,
        fingerprint=plan.fingerprint,
        feed_cursor=talked.feed_cursor,
        nearest=talked.nearest,
        removed_entries=len(removed),
        initialized=options.initialize,
        uploading=background is not None and background.uploading,
        following=background is not None and background.follower is not None,
        seconds=round(time.monotonic() - started, 3),
        run_id=reporter.run_id if reporter is not None else None,
    )
    if reporter is not None:
        reporter.begin(
            WarmFacts(
                started_at=time.time() - (time.monotonic() - started),
                seconds=report.seconds,
                bytes=report.downloaded_bytes + report.present_bytes,
                entries=report.downloaded_entries + report.present_entries,
            )
        )
    logger.info(report.summary())
    return report


def _prepare(plan: WarmPlan) -> list[str]:
    """Make the namespace's directory and record its fingerprint there; a failure (a full disk, say) is
    returned, and the warm goes on: it fails open as for any server trouble."""
    options = plan.options
    try:
        plan.directory.mkdir(parents=True, exist_ok=True)
        if plan.record_fingerprint:  # for xla-cache push
            write_fingerprint(plan.directory, plan.fingerprint)
        if plan.register:  # this runtime's namespace, for xla-cache stats and graphs without one
            at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            last = LastWarm(plan.namespace, options.framework.name, at, options.config.server)
            record_last_warm(options.config.cache_dir, last)
    except OSError as exc:
        return [f"cannot write into the cache directory {plan.directory} ({exc})"]
    return []


def _start_background(
    plan: WarmPlan,
    api: CacheApi | None,
    talked: Conversation,
    on_server: set[str],
    *,
    failed: bool,
    unloadable: list[str],
) -> Background:
    """Start the uploader (which uploads only when there is a server, the token may write and this process
    writes the cache; ``failed``: the warm met trouble, warned of once), the run reporter (unless
    ``XLA_CACHE_RUN_REPORTS=0``; it reports from the uploader's thread) and, when following, the follower
    from the cursor taken before the manifest. ``unloadable``: the keys removed because the framework could
    not load them."""
    options = plan.options
    framework = options.framework
    present = scan(plan.directory, framework.is_entry)
    known: dict[str, LocalFile] = {key: item for key, item in present.items() if key in on_server}
    follower: Follower | None = None
    uploader: Uploader | None = None

    def transfers() -> Transfers:  # read once the uploader and follower run
        return Transfers(
            uploaded=uploader.report().uploaded if uploader is not None else 0,
            live=follower.report().delivered if follower is not None else 0,
            live_keys=follower.placed_keys() if follower is not None else frozenset(),
            unverified=talked.unverified + (follower.report().unverified if follower is not None else 0),
        )

    reporter: RunReporter | None = None
    try:
        reporter = reporter_for(
            plan,
            api,
            baseline=present,
            unloadable=unloadable,
            transfers=transfers,
            unanswered=talked.unavailable,
            warned=failed,
        )
    except Exception:  # fail-open: a run report only explains; the job goes on without one
        logger.warning("xla-cache: cannot report this run (the job goes on without a report)", exc_info=True)
    uploading = options.upload and api is not None and not talked.read_only and framework.uploads_here()
    uploader = Uploader(
        api if uploading else None,
        plan.namespace,
        plan.directory,
        framework=framework,
        fingerprint=plan.fingerprint,
        known=known,
        timeout=options.timeout,
        server_failed=failed,
        last_failure_unavailable=talked.unavailable,
        on_tick=reporter.tick if reporter is not None else None,
        # Following: each new compilation goes up within about half a second of being written.
        **({"interval": FOLLOW_UPLOAD_INTERVAL, "settle": FOLLOW_UPLOAD_INTERVAL} if options.follow else {}),
    )
    uploader.start()
    if options.follow and api is not None and talked.feed_cursor is not None:
        cursor, check = talked.feed_cursor, framework.entry_problem
        follower = Follower(api, plan.namespace, plan.directory, cursor, check=check, trusted=options.trusted)
        follower.start()
    return Background(uploader, follower, api, reporter)


def _summarize(errors: list[str], limit: int = 3) -> str:
    unique = list(dict.fromkeys(errors))
    text = "; ".join(unique[:limit])
    if len(unique) > limit:
        text += f"; and {len(unique) - limit} more"
    return text


_SETTLED_SECONDS = 60.0  # an entry file untouched this long is not being written by anyone


def _remove_unloadable(plan: WarmPlan, on_server: set[str]) -> list[str]:
    """Remove local entries the framework could not load, so that it writes them again; their keys.

    Only in the process that writes the cache (the others may share its directory on one host), never an
    entry the server vouched for, and never a file modified in the last minute (it may be being written).
    """
    if not plan.options.framework.uploads_here():
        return []
    removed: list[str] = []
    settled = time.time() - _SETTLED_SECONDS
    for item in scan(plan.directory, plan.options.framework.is_entry, skip=on_server).values():
        if item.mtime_ns / 1e9 > settled:
            continue
        problem = plan.options.framework.entry_problem(item.path)
        if problem is not None:
            logger.warning(
                "xla-cache: removing %s so that %s writes it again: %s",
                item.path,
                plan.options.framework.name,
                problem,
            )
            with contextlib.suppress(FileNotFoundError):
                item.path.unlink()
            removed.append(item.key)
    return removed
