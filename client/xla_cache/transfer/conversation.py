"""A warm's conversation with the server, in a worker thread the caller waits for at most the timeout.

The worker's steps run straight down, each returning what it found: lock the namespace's directory,
register the namespace, take the change feed's cursor (when following), read the manifest and split it
into entries present and entries needed (:class:`Survey`), download the needed, and when the namespace
turns out empty or thin, ask which namespaces are nearest (:mod:`xla_cache.transfer.nearest`). :func:`talk`
returns the worker's :class:`Conversation`. Whatever the server does (refuse, hang, fail, send garbage), it
returns within the timeout: when the time is up first, it cancels the worker and returns what the worker had
reported so far (the survey, and each entry once it was in place), so a warm cut short still counts every
entry it placed.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cache_protocol.prefill import is_prefilled, is_unverified
from xla_cache.errors import ServerError, ServerProblem, ServerUnavailable
from xla_cache.http.api import CacheApi, RemoteEntry
from xla_cache.http.deadline import Deadline
from xla_cache.localcache.cachedir import remove_temp_files
from xla_cache.localcache.dirlock import DirLock
from xla_cache.transfer.download import DownloadOptions, DownloadResult, download, split_present
from xla_cache.transfer.nearest import NearNamespace, ask_nearest
from xla_cache.transfer.plan import WarmPlan
from xla_cache.transfer.trust import EntryTrust

__all__ = ["Conversation", "Survey", "WarmCounts", "talk"]

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
    unverified_entries: int = 0  # skipped: no trusted key signed them (XLA_CACHE_TRUSTED_KEYS)
    prefilled_entries: int = 0  # of the manifest, entries a prefill stored (compiled ahead, issue 44)
    prefilled_unverified: int = 0  # of those, published with no real run to compare the target with


@dataclass(frozen=True, kw_only=True)
class Survey:
    """The manifest, split into entries already in the directory (right size and SHA-256) and entries to
    fetch, with how many bundles the server streams at once."""

    manifest_entries: int = 0
    prefilled: int = 0  # of the manifest's entries, those a prefill stored
    prefilled_unverified: int = 0
    present: list[RemoteEntry] = field(default_factory=list)
    needed: list[RemoteEntry] = field(default_factory=list)
    bundle_streams: int | None = None


@dataclass(frozen=True, kw_only=True)
class Conversation:
    """What the worker found, fetched and met."""

    survey: Survey = field(default_factory=Survey)
    fetched: DownloadResult = field(default_factory=DownloadResult)
    errors: list[str] = field(default_factory=list)
    unavailable: bool = False  # the last failure was the server not answering (not a refusal)
    read_only: bool = False  # the token may read but not write: nothing is uploaded
    feed_cursor: int | None = None  # where following starts (taken before the manifest)
    nearest: list[NearNamespace] = field(default_factory=list)  # when the namespace is empty or thin
    unverified: int = 0  # entries skipped because no trusted key signed them
    unverified_reasons: str = ""  # "3 unsigned, 1 bad signature"

    def counts(self) -> WarmCounts:
        present = self.survey.present
        return WarmCounts(
            manifest_entries=self.survey.manifest_entries,
            downloaded_entries=self.fetched.entries,
            downloaded_bytes=self.fetched.bytes,
            present_entries=len(present),
            present_bytes=sum(entry.size for entry in present),
            unverified_entries=self.unverified,
            prefilled_entries=self.survey.prefilled,
            prefilled_unverified=self.survey.prefilled_unverified,
        )

    def on_server(self) -> set[str]:
        """The local keys the server is known to hold: those found present and those downloaded."""
        return {entry.key for entry in self.survey.present} | set(self.fetched.keys)


def talk(api: CacheApi, plan: WarmPlan) -> tuple[Conversation, float]:
    """Run the conversation in a worker thread for at most the plan's timeout; returns it and the seconds
    it took."""
    timeout = plan.options.timeout
    cancel = threading.Event()
    deadline = Deadline(max(0.0, timeout - min(_WORKER_MARGIN, timeout / 10)))
    news: queue.SimpleQueue[Survey | RemoteEntry] = queue.SimpleQueue()  # read only if the time is up
    answer: queue.SimpleQueue[Conversation] = queue.SimpleQueue()
    worker = threading.Thread(
        target=lambda: answer.put(_converse(api, plan, deadline, cancel, news.put)),
        name="xla-cache-warm",
        daemon=True,
    )
    started = time.monotonic()
    worker.start()
    try:
        conversation = answer.get(timeout=max(0.0, timeout))
    except queue.Empty:
        cancel.set()
        conversation = _so_far(news, f"{api.server} did not finish the warm within the {timeout:g} s timeout")
    return conversation, round(time.monotonic() - started, 3)


def _so_far(news: queue.SimpleQueue[Survey | RemoteEntry], error: str) -> Conversation:
    """What the worker reported before the time was up: an entry is reported once it is in place."""
    survey = Survey()
    placed = DownloadResult()
    while True:
        try:
            item = news.get_nowait()
        except queue.Empty:
            break
        if isinstance(item, Survey):
            survey = item
        else:
            placed.entries += 1
            placed.bytes += item.size
            placed.keys.append(item.key)
    return Conversation(survey=survey, fetched=placed, errors=[error], unavailable=True)


def _converse(
    api: CacheApi,
    plan: WarmPlan,
    deadline: Deadline,
    cancel: threading.Event,
    report: Callable[[Survey | RemoteEntry], None],
) -> Conversation:
    """The worker: each step in turn, ``report`` told of the survey and of each entry placed."""
    errors: list[str] = []
    read_only, cursor, unavailable = False, None, False
    survey, fetched = Survey(), DownloadResult()
    nearest: list[NearNamespace] = []
    trust = EntryTrust(plan.options.trusted, plan.namespace) if plan.options.trusted else None
    lock = DirLock(plan.directory)
    try:
        if not lock.acquire(deadline.remaining()):
            holder = lock.holder_pid()
            errors.append(
                f"another process{f' (pid {holder})' if holder else ''} is warming {plan.directory}; "
                f"gave up waiting after {deadline.seconds:g} s"
            )
            return Conversation(errors=errors)
        remove_temp_files(plan.directory)
        if plan.register:
            read_only, notes = _register(api, plan, deadline)
            errors += notes
        if plan.options.follow:
            cursor, notes = _feed_cursor(api, plan, deadline)
            errors += notes
        survey = _survey(api, plan, deadline)
        report(survey)
        if survey.needed and not cancel.is_set():
            fetched = download(
                api,
                plan.namespace,
                survey.needed,
                plan.directory,
                DownloadOptions(
                    deadline=deadline,
                    check=plan.options.framework.entry_problem,
                    progress=plan.options.progress,
                    cancel=cancel,
                    on_placed=report,
                    bundle_streams=survey.bundle_streams,
                    trust=trust,
                ),
            )
            errors += fetched.errors
            unavailable = bool(fetched.errors) and cancel.is_set()
        if not cancel.is_set():
            nearest = ask_nearest(api, plan.namespace, plan.fingerprint, survey.manifest_entries, deadline)
    except ServerProblem as exc:
        errors.append(exc.reason)
        unavailable = isinstance(exc, ServerUnavailable)
    except OSError as exc:
        errors.append(f"cannot use the cache directory {plan.directory} ({exc})")
    except Exception as exc:  # a bug, not the server: report it as what it is, not as a timeout
        errors.append(f"the warm failed: {type(exc).__name__}: {exc}")
    finally:
        lock.release()
    return Conversation(
        survey=survey,
        fetched=fetched,
        errors=errors,
        unavailable=unavailable,
        read_only=read_only,
        feed_cursor=cursor,
        nearest=nearest,
        unverified=trust.refused if trust is not None else 0,
        unverified_reasons=trust.reasons() if trust is not None else "",
    )


def _register(api: CacheApi, plan: WarmPlan, deadline: Deadline) -> tuple[bool, list[str]]:
    """Register the namespace with its fingerprint. Returns whether the token is read-only, and the
    refusal the warm goes on despite, if any."""
    try:
        api.register_namespace(plan.namespace, plan.fingerprint, plan.options.labels, deadline)
    except ServerError as exc:
        if exc.status == 403:  # a read-only token: warming works, registering and uploading do not
            return True, [f"{exc.reason}; with this token the job warms but uploads nothing"]
        if exc.status >= 500:  # a busy or failing index: the namespace may well be there already
            return False, [f"could not register the namespace ({exc.reason}); warming anyway"]
        raise
    return False, []


def _feed_cursor(api: CacheApi, plan: WarmPlan, deadline: Deadline) -> tuple[int | None, list[str]]:
    """The change feed's cursor, taken before the manifest: what is stored from then on, the follower
    fetches. None, and why, from a server without a feed."""
    try:
        return api.feed(plan.namespace, None, 0.0, deadline).cursor, []
    except ServerError as exc:
        if exc.status not in (404, 405):
            raise
        return None, ["this server has no change feed (an older version): not following"]


def _survey(api: CacheApi, plan: WarmPlan, deadline: Deadline) -> Survey:
    manifest = api.manifest(plan.namespace, deadline, max_bytes=plan.options.max_bytes)
    present, needed = split_present(manifest.entries, plan.directory, plan.options.framework.is_entry)
    return Survey(
        manifest_entries=len(manifest.entries),
        prefilled=sum(1 for entry in manifest.entries if is_prefilled(entry.prefilled)),
        prefilled_unverified=sum(1 for entry in manifest.entries if is_unverified(entry.prefilled)),
        present=present,
        needed=needed,
        bundle_streams=manifest.bundle_streams,
    )
