"""Bulk upload: many entries in one tar stream (``POST /v1/namespaces/{ns}/entries``), each with the same
outcome a ``PUT`` of it would have, and the durability work batched.

Each member is a regular file named by its key, with PAX records ``XLA_CACHE.sha256`` (required) and
``XLA_CACHE.compile_time_ms`` (optional), read by the strict :class:`cache_protocol.tar.TarReader`. Members
are checked as they stream (name, digest record, size limit, digest of the bytes) and put into a
:class:`~cache_server.storage.base.BlobBatch`; every :data:`GROUP_ENTRIES` members (or
:data:`GROUP_BYTES` bytes) the batch is committed (one filesystem sync on a local store; overlapping
requests on GCS), then the group's index rows are written in one transaction. A result of 201 or 200 for a
member therefore means what it means for a ``PUT``: the entry survives a crash. A stream that breaks
(malformed, cut short, the client gone) keeps the groups committed before it and nothing of the group it
broke in.

Into a store that packs (:mod:`cache_server.packs`) each small member is also copied into a pack, sealed
and written at :data:`~cache_server.packs.PACK_BYTES` as the stream goes on; a group is also committed once
:data:`~cache_server.packs.GROUP_PACK_BYTES` of copies wait for it, and its rows point into its packs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from cache_protocol import BUNDLE_COMPILE_TIME_PAX, BUNDLE_SHA256_PAX, MAX_COMPILE_TIME_MS, SHA256_PATTERN
from cache_protocol.tar import TarMember
from cache_server.domain import Clock
from cache_server.errors import (
    CacheError,
    DigestConflict,
    DigestMismatch,
    EntryInFlight,
    EntryTooLarge,
    InvalidName,
    QuotaExceeded,
)
from cache_server.existing import TakenName
from cache_server.index.entries import EntryRecord, EntryRepository
from cache_server.names import check_key
from cache_server.packs import PACK_WRITERS, PackWriter
from cache_server.quotas import UploadAllowance
from cache_server.revocation import StillAllowed, check_still_allowed, undo_if_revoked
from cache_server.storage.base import (
    MIB,
    BlobBatch,
    BlobInfo,
    BlobStore,
    StoresPacks,
    blob_name,
    open_batch,
)

__all__ = ["GROUP_BYTES", "GROUP_ENTRIES", "BulkResult", "MemberResult", "put_members"]

log = logging.getLogger(__name__)

GROUP_ENTRIES = 512  # members per commit: one sync and one index transaction
GROUP_BYTES = 256 * MIB  # ... or fewer, when they are this large together


@dataclass
class MemberResult:
    """One member's outcome, as the status a ``PUT`` of it would have got (201, 200, 400, 409, 413, 503,
    507)."""

    key: str
    status: int
    size: int | None = None
    sha256: str | None = None
    error: str | None = None
    detail: str | None = None


@dataclass
class BulkResult:
    """Every member's outcome, in stream order."""

    results: list[MemberResult]

    def count(self, status: int) -> int:
        return sum(1 for result in self.results if result.status == status)


@dataclass
class _Pending:
    """A member put into the batch, waiting for its group's commit."""

    key: str
    size: int
    sha256: str
    compile_time_ms: int | None
    result: MemberResult


def _refused(key: str, status: int, exc: CacheError) -> MemberResult:
    return MemberResult(key=key, status=status, error=exc.code, detail=exc.detail)


def _member_fields(member: TarMember, limit: int) -> tuple[str, int | None]:
    """The member's digest and compile time; :class:`CacheError` for what a PUT would refuse."""
    check_key(member.name)
    sha256 = member.pax.get(BUNDLE_SHA256_PAX, "")
    if not SHA256_PATTERN.fullmatch(sha256):
        raise InvalidName(
            f"The member {member.name!r} needs a PAX record {BUNDLE_SHA256_PAX} with its SHA-256 "
            "(64 lowercase hex digits)."
        )
    compile_ms: int | None = None
    if BUNDLE_COMPILE_TIME_PAX in member.pax:
        text = member.pax[BUNDLE_COMPILE_TIME_PAX]
        # ASCII digits, few enough for int() (which refuses over 4,300 digits, and "²" at all)
        whole = text.isascii() and text.isdigit() and len(text) <= len(str(MAX_COMPILE_TIME_MS))
        if not whole or int(text) > MAX_COMPILE_TIME_MS:
            raise InvalidName(
                f"{BUNDLE_COMPILE_TIME_PAX} of {member.name!r} must be a whole number of milliseconds, "
                f"0 to {MAX_COMPILE_TIME_MS}."
            )
        compile_ms = int(text)
    if member.size > limit:
        raise EntryTooLarge(
            f"The entry is {member.size} bytes; the limit is {limit} bytes (XLA_CACHE_MAX_ENTRY_BYTES)."
        )
    return sha256, compile_ms


_STATUS = {
    "invalid_name": 400,
    "digest_mismatch": 400,
    "entry_too_large": 413,
    "digest_conflict": 409,
    "quota_exceeded": 507,
    "entry_in_flight": 503,
}


def put_members(
    namespace: str,
    members: Iterator[TarMember],
    *,
    entries: EntryRepository,
    store: BlobStore,
    max_entry_bytes: int,
    checked: Callable[[Iterator[bytes], str, int], Iterator[bytes]],
    metadata: Callable[[str, str, int | None], dict[str, str]],
    clock: Clock,
    stored_by: str | None = None,
    on_stored: Callable[[str, str], None] | None = None,
    packs: StoresPacks | None = None,
    still_allowed: StillAllowed | None = None,
    quota: UploadAllowance | None = None,
    taken: Callable[[str, str], TakenName] | None = None,
    max_group_seconds: float = float("inf"),
) -> BulkResult:
    """Store the members of one stream into ``namespace`` (already checked); see the module docstring.

    ``checked`` wraps a member's chunks with the digest and size checks of a single upload; ``metadata``
    gives a blob's metadata from its key, digest and compile time. ``packs``: the store to write packs to,
    if any (the same store). ``still_allowed``: whether the stream's token is still active, asked before
    and after each group's commit (:mod:`cache_server.revocation`): once it is not, the stream ends with
    :class:`~cache_server.errors.TokenRevoked` and its group is not stored. ``quota``: what the upload
    may store (:mod:`cache_server.quotas`); a member past it is refused (507) before any of its bytes are
    stored, its bytes skipped. ``taken``: the rules for a blob already stored under a member's key, from
    its key and digest (:mod:`cache_server.existing`; without it a taken name is only ever a 200 or a 409).
    ``max_group_seconds``: a group open this long is committed at the next member's start or end, whatever
    its size (a slow stream's blobs must not wait past the orphan grace period for their rows).
    """
    results: list[MemberResult] = []
    group: list[_Pending] = []
    group_bytes = 0
    seen: set[str] = set()
    with (
        ThreadPoolExecutor(PACK_WRITERS, thread_name_prefix="xla-cache-pack-write") as pool,
        open_batch(store) as batch,
    ):
        writer = PackWriter(packs, pool) if packs is not None else None

        rules: dict[str, TakenName] = {}
        opened = [0.0]  # when the waiting group got its first member (time.monotonic)

        def aged() -> bool:
            """Whether the waiting group has been open ``max_group_seconds``: its blobs (visible at once on
            GCS) and temp files must get their rows well within the orphan grace period, or gc and other
            uploads would take them for the leftovers of a dead upload."""
            return time.monotonic() - opened[0] >= max_group_seconds

        def commit() -> None:
            check_still_allowed(still_allowed)  # a revoked token commits nothing more
            _commit(
                namespace,
                group,
                batch,
                writer,
                entries,
                store,
                clock,
                stored_by,
                on_stored,
                still_allowed,
                rules,
            )
            rules.clear()
            if quota is not None and group:
                quota.committed()

        try:
            for member in members:
                key = member.name
                try:
                    sha256, compile_ms = _member_fields(member, max_entry_bytes)
                    if key in seen:
                        raise InvalidName(f"The key {key!r} appears twice in this upload.")
                    seen.add(key)
                    packed = writer is not None and writer.takes(member.size)
                    if group and ((packed and writer is not None and writer.full()) or aged()):
                        commit()  # before the member is admitted: a commit starts the quota's count anew
                        group, group_bytes = [], 0
                    if quota is not None:
                        quota.admit(
                            member.size, stored=partial(_stored_same, entries, namespace, key, sha256)
                        )
                    chunks = checked(member.chunks(), sha256, max_entry_bytes)
                    if packed and writer is not None:
                        chunks = writer.copying(key, chunks)
                    judge = None
                    if taken is not None:
                        rules[key] = taken(key, sha256)
                        judge = rules[key].judge
                    batch.put(
                        blob_name(namespace, key), chunks, metadata(key, sha256, compile_ms), replace=judge
                    )
                except (InvalidName, DigestMismatch, EntryTooLarge, QuotaExceeded) as exc:
                    results.append(_refused(key, _STATUS[exc.code], exc))
                    continue
                result = MemberResult(key=key, status=0, size=member.size, sha256=sha256)
                results.append(result)
                if not group:
                    opened[0] = time.monotonic()
                group.append(_Pending(key, member.size, sha256, compile_ms, result))
                group_bytes += member.size
                if len(group) >= GROUP_ENTRIES or group_bytes >= GROUP_BYTES or aged():
                    commit()
                    group, group_bytes = [], 0
            commit()
        except BaseException:
            if writer is not None:  # the stream broke: the packs of its last group would be orphans
                writer.abandon()
            raise
    return BulkResult(results)


def _stored_same(entries: EntryRepository, namespace: str, key: str, sha256: str) -> bool:
    """Whether the key is stored with this digest already (a member that adds nothing to a quota)."""
    existing = entries.get_entry(namespace, key)
    return existing is not None and existing.sha256 == sha256


def _commit(
    namespace: str,
    group: list[_Pending],
    batch: BlobBatch,
    writer: PackWriter | None,
    entries: EntryRepository,
    store: BlobStore,
    clock: Clock,
    stored_by: str | None,
    on_stored: Callable[[str, str], None] | None,
    still_allowed: StillAllowed | None = None,
    rules: Mapping[str, TakenName] | None = None,
) -> None:
    """Make the group's blobs (and its pack) durable, then write their rows; fill in each member's result.
    ``rules``: per key, what a member whose name was taken gets (:meth:`TakenName.outcome`)."""
    if writer is not None:
        writer.start()
    try:
        created = batch.commit() if group else {}
    except BaseException:
        if writer is not None:
            writer.abandon()
        raise
    located = (
        writer.finish({p.key for p in group if created.get(blob_name(namespace, p.key))})
        if writer is not None
        else {}
    )
    if not group:
        return
    now = clock()
    new: list[EntryRecord] = []
    found: list[EntryRecord] = []
    for pending in group:
        name = blob_name(namespace, pending.key)
        if created.get(name):
            pack, pack_offset = located.get(pending.key, (None, None))
            record = EntryRecord(
                namespace=namespace,
                key=pending.key,
                size=pending.size,
                sha256=pending.sha256,
                created_at=now,
                compile_time_ms=pending.compile_time_ms,
                stored_by=stored_by,
                pack=pack,
                pack_offset=pack_offset,
            )
            new.append(record)
            pending.result.status = 201
            continue
        rule = rules.get(pending.key) if rules is not None else None
        if rule is not None:  # already stored: adopted (200), another digest in the index (409), or 503
            try:
                info: BlobInfo | None = rule.outcome().info
            except (DigestConflict, EntryInFlight) as exc:
                pending.result.status = _STATUS[exc.code]
                pending.result.error = exc.code
                pending.result.detail = exc.detail
                continue
        else:
            info = store.stat(name)  # already stored: the same bytes (200), or others (409)
        stored_sha = info.metadata.get("sha256", "") if info is not None else ""
        if info is None or stored_sha != pending.sha256:
            pending.result.status = 409
            pending.result.error = "digest_conflict"
            pending.result.detail = (
                f"The key {pending.key!r} in namespace {namespace!r} is already stored with SHA-256 "
                f"{stored_sha or '(unknown)'}; entries are immutable and the first upload stays."
            )
            continue
        pending.result.status = 200
        found.append(
            EntryRecord(
                namespace=namespace,
                key=pending.key,
                size=info.size,
                sha256=stored_sha,
                created_at=info.created,
                stored_by=info.metadata.get("stored_by") or None,
            )
        )
    entries.record_new_entries(new)
    if found:
        entries.add_missing_entries(found)  # a blob whose row was lost: the row comes back, uncounted
    # before the feed hears of them; with the rows adopted from orphans this token left (a purge that ran
    # before they were written did not see them)
    adopted = [r for r in found if stored_by is not None and r.stored_by == stored_by]
    undo_if_revoked(still_allowed, new + adopted, entries=entries, store=store)
    if on_stored is not None:
        for record in new:
            on_stored(record.namespace, record.key)
