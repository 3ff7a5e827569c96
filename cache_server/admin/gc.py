"""Reconciling the blob store with the index: orphan blobs removed, rows whose blob is gone dropped.

Both kinds of mismatch are expected after crashes (the blob is written before its row, and deleted after
it). gc must not mistake work in progress for either:

* a blob without a row may be an upload whose row is about to be written, so only blobs older than the
  grace period are orphans (and the index is asked again right before each delete);
* a row without a blob is only dropped if the row is older than the listing (so its blob, written before
  the row, would have been listed) and the store confirms the blob is absent;
* a pack (:mod:`cache_server.service.packs`) is deleted once no row points into it and it is older than
  the grace period (a pack is written before the rows that point into it).

A damaged blob (:func:`cache_server.service.taken_names.unreadable`: its header or metadata cannot be read) is
counted and logged in one line, never fatal: its row, if any, is dropped (the entry cannot be served) and the
blob is set aside (:meth:`~cache_server.storage.base.BlobStore.set_aside`: a local store moves it into
``<root>/.damaged/``, GCS deletes it), if it is still damaged when gc gets to it. No upload leaves a
damaged blob, so there is no grace period for these; a dry run only counts them.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cache_server.domain import utcnow
from cache_server.index.admin import AdminRepository
from cache_server.service.taken_names import unreadable
from cache_server.storage.abilities import StoresPacks, SweepsTempFiles
from cache_server.storage.base import BlobInfo, BlobStore, blob_name, split_blob_name

__all__ = ["DEFAULT_GRACE_SECONDS", "GcResult", "collect_garbage", "remove_unused_packs"]

log = logging.getLogger(__name__)
DEFAULT_GRACE_SECONDS = 3600.0
TEMP_MIN_AGE_SECONDS = 300.0
"""Upload temp files younger than this are kept whatever the grace period: an upload in progress writes its
temp file far more often (a body that stalls longer is refused: XLA_CACHE_BODY_TIMEOUT_SECONDS)."""
CHECK_BATCH = 500


@dataclass
class GcResult:
    """What gc looked at and what it removed (or would remove, on a dry run)."""

    blobs_checked: int = 0
    rows_checked: int = 0
    orphan_blobs_removed: int = 0
    orphan_bytes_removed: int = 0
    rows_dropped: int = 0
    temp_files_removed: int = 0
    packs_checked: int = 0
    packs_removed: int = 0
    pack_bytes_removed: int = 0
    dry_run: bool = False
    damaged_blobs: int = 0
    """Damaged blobs found (set aside, unless a dry run)."""


def collect_garbage(
    repository: AdminRepository,
    store: BlobStore,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    dry_run: bool = False,
    forget: Callable[[Sequence[tuple[str, str]]], None] = lambda refs: None,
) -> GcResult:
    """Remove blobs without rows and rows without blobs; see the module docstring for the safety rules.
    ``forget`` drops this process's memory copies of the rows dropped (:mod:`cache_server.service.hot`)."""
    result = GcResult(dry_run=dry_run)
    started = utcnow()
    old_enough = started - dt.timedelta(seconds=grace_seconds)
    listed: dict[str, set[str]] = defaultdict(set)
    candidates: dict[str, dict[str, int]] = defaultdict(dict)  # namespace -> key -> size, blobs past grace

    def check(namespace: str) -> None:
        keys = candidates.pop(namespace, {})
        if not keys:
            return
        present = repository.present_keys(namespace, list(keys))
        for key, size in keys.items():
            if key in present:
                continue
            if not dry_run and not store.delete(blob_name(namespace, key)):
                continue
            result.orphan_blobs_removed += 1
            result.orphan_bytes_removed += size

    for info in store.list():
        result.blobs_checked += 1
        namespace, key = split_blob_name(info.name)
        listed[namespace].add(key)
        if unreadable(info) is not None:
            _set_aside_damaged(repository, store, info, result, forget)
            continue
        if info.created <= old_enough:
            candidates[namespace][key] = info.size
            if len(candidates[namespace]) >= CHECK_BATCH:
                check(namespace)
    for namespace in list(candidates):
        check(namespace)

    for namespace in repository.namespace_names():
        _drop_lost_rows(repository, store, namespace, listed.get(namespace, set()), started, result, forget)

    if isinstance(store, StoresPacks):
        remove_unused_packs(repository, store, old_enough, result)
    if isinstance(store, SweepsTempFiles) and not dry_run:
        result.temp_files_removed = store.remove_stale_temp_files(max(grace_seconds, TEMP_MIN_AGE_SECONDS))
    log.info("gc: %s", result)
    return result


def _set_aside_damaged(
    repository: AdminRepository,
    store: BlobStore,
    info: BlobInfo,
    result: GcResult,
    forget: Callable[[Sequence[tuple[str, str]]], None],
) -> None:
    """Count a damaged blob; unless a dry run, drop its row and set it aside if it is still damaged."""
    result.damaged_blobs += 1
    dry = " (dry run: left in place)" if result.dry_run else ""
    log.warning("gc: damaged blob %s: %s%s", info.name, unreadable(info), dry)
    if result.dry_run:
        return
    now = store.stat(info.name)  # an upload may have replaced it meanwhile
    if now is None or unreadable(now) is None:
        return
    namespace, key = split_blob_name(info.name)
    removed = repository.delete_entries([(namespace, key)], policy="damaged", when=utcnow())
    forget([(ns, k) for ns, k, _ in removed])
    store.set_aside(info.name)


def _drop_lost_rows(
    repository: AdminRepository,
    store: BlobStore,
    namespace: str,
    listed: set[str],
    started: dt.datetime,
    result: GcResult,
    forget: Callable[[Sequence[tuple[str, str]]], None],
) -> None:
    after: str | None = None
    while page := repository.keys_page(namespace, after=after, limit=CHECK_BATCH):
        after = page[-1][0]
        result.rows_checked += len(page)
        lost: list[str] = []
        for key, created in page:
            if key in listed or created >= started:
                continue
            info = store.stat(blob_name(namespace, key))
            if info is None:
                lost.append(key)
            elif unreadable(info) is not None:  # not listed as a blob (a directory in its place): damaged
                _set_aside_damaged(repository, store, info, result, forget)
        if result.dry_run:
            result.rows_dropped += len(lost)
        elif lost:
            removed = repository.delete_entries([(namespace, k) for k in lost], policy="lost", when=utcnow())
            forget([(namespace, key) for _, key, _ in removed])
            result.rows_dropped += len(removed)


def remove_unused_packs(
    repository: AdminRepository, store: StoresPacks, old_enough: dt.datetime, result: GcResult
) -> None:
    """Delete the packs created before ``old_enough`` that no row points into (count them on a dry run).

    Also run by budget eviction after it removed entries, so evicted copies do not wait for an operator's gc.
    """
    candidates: dict[str, int] = {}  # pack id -> size, packs past grace

    def check() -> None:
        used = repository.referenced_packs(list(candidates))
        for pack_id, size in candidates.items():
            if pack_id in used or (not result.dry_run and not store.delete_pack(pack_id)):
                continue
            result.packs_removed += 1
            result.pack_bytes_removed += size
        candidates.clear()

    for info in store.list_packs():
        result.packs_checked += 1
        if info.created <= old_enough:
            candidates[info.name] = info.size
            if len(candidates) >= CHECK_BATCH:
                check()
    check()
