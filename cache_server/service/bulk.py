"""Bulk upload: many entries in one tar stream (``POST /v1/namespaces/{ns}/entries``), each with the same
outcome a ``PUT`` of it would have (the rules are :mod:`cache_server.service.writer`'s), and the
durability work batched.

Each member is a regular file named by its key, with PAX records ``XLA_CACHE.sha256`` (required),
``XLA_CACHE.compile_time_ms`` and ``XLA_CACHE.signature`` (optional), read by the strict
:class:`cache_protocol.tar.TarReader`. Members are checked as they stream (name, digest record,
signature, size limit, digest of the bytes) and put into a :class:`~cache_server.storage.abilities.BlobBatch`;
every :data:`GROUP_ENTRIES` members (or
:data:`GROUP_BYTES` bytes) the batch is committed (one filesystem sync on a local store; overlapping
requests on GCS), then the group's index rows are written in one transaction. A result of 201 or 200 for a
member therefore means what it means for a ``PUT``: the entry survives a crash. A stream that breaks
(malformed, cut short, the client gone) keeps the groups committed before it and nothing of the group it
broke in.

Into a store that packs (:mod:`cache_server.service.packs`) each small member is also copied into a pack,
sealed and written at :data:`~cache_server.service.packs.PACK_BYTES` as the stream goes on; a group is also
committed once :data:`~cache_server.service.packs.GROUP_PACK_BYTES` of copies wait for it, and its rows point
into its packs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from cache_protocol import BUNDLE_COMPILE_TIME_PAX, BUNDLE_SHA256_PAX, MAX_COMPILE_TIME_MS, SHA256_PATTERN
from cache_protocol.signing import SIGNATURE_PAX
from cache_protocol.tar import TarMember
from cache_server.auth.revocation import StillAllowed
from cache_server.domain import EntryRef
from cache_server.errors import (
    CacheError,
    DigestConflict,
    EntryInFlight,
    EntryRefused,
    InvalidName,
    QuotaExceeded,
)
from cache_server.index.entries import EntryRecord
from cache_server.service.packs import PACK_WRITERS, PackWriter
from cache_server.service.writer import EntryWriter, Pending, Upload
from cache_server.storage.abilities import BlobBatch, StoresPacks
from cache_server.storage.base import MIB

__all__ = ["GROUP_BYTES", "GROUP_ENTRIES", "BulkResult", "BulkUploads", "MemberOutcome"]

log = logging.getLogger(__name__)

GROUP_ENTRIES = 512  # members per commit: one sync and one index transaction
GROUP_BYTES = 256 * MIB  # ... or fewer, when they are this large together

_SETTLED_REFUSED = (DigestConflict, EntryInFlight)  # at its commit: its name was taken


@dataclass
class MemberOutcome:
    """One member's outcome, as a ``PUT`` of it would have had it: ``stored`` True (new), False (the same
    bytes were stored already), None (refused with ``error``; nothing of it stored)."""

    key: str
    stored: bool | None = None
    size: int | None = None
    sha256: str | None = None
    error: CacheError | None = None


@dataclass
class BulkResult:
    """Every member's outcome, in stream order."""

    results: list[MemberOutcome]

    @property
    def stored(self) -> int:
        """How many members were stored new."""
        return sum(1 for result in self.results if result.stored)

    @property
    def already_stored(self) -> int:
        """How many members were stored already with the same bytes."""
        return sum(1 for result in self.results if result.stored is False)


def _member_fields(member: TarMember) -> tuple[str, int | None]:
    """The member's digest and compile time as its PAX records give them; :class:`InvalidName` when one
    cannot be read."""
    sha256 = member.pax.get(BUNDLE_SHA256_PAX, "")
    if not SHA256_PATTERN.fullmatch(sha256):
        raise InvalidName(
            f"The member {member.name!r} needs a PAX record {BUNDLE_SHA256_PAX} with its SHA-256 "
            "(64 lowercase hex digits)."
        )
    if BUNDLE_COMPILE_TIME_PAX not in member.pax:
        return sha256, None
    text = member.pax[BUNDLE_COMPILE_TIME_PAX]
    # ASCII digits, few enough for int() (which refuses over 4,300 digits, and "²" at all); the writer
    # checks the range
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(MAX_COMPILE_TIME_MS))):
        raise InvalidName(
            f"{BUNDLE_COMPILE_TIME_PAX} of {member.name!r} must be a whole number of milliseconds, "
            f"0 to {MAX_COMPILE_TIME_MS}."
        )
    return sha256, int(text)


@dataclass
class _Group:
    """The members put into the batch since its last commit, each with its outcome to fill in."""

    pending: list[tuple[Pending, MemberOutcome]]
    bytes: int = 0
    opened: float = 0.0  # when its first member was put (time.monotonic)

    def aged(self, seconds: float) -> bool:
        """Whether it has members and has been open ``seconds`` (:attr:`EntryWriter.max_group_seconds`)."""
        return bool(self.pending) and time.monotonic() - self.opened >= seconds


class BulkUploads:
    """Bulk uploads with ``writer``'s rules; ``packs``: the store to write packs to, if any (the same)."""

    def __init__(self, writer: EntryWriter, packs: StoresPacks | None) -> None:
        self._writer = writer
        self._packs = packs

    def put_entries(
        self,
        namespace: str,
        members: Iterator[TarMember],
        *,
        stored_by: str | None = None,
        still_allowed: StillAllowed | None = None,
        uploader: str | None = None,
    ) -> BulkResult:
        """Store the members of one uploaded tar stream: each gets the outcome a ``PUT`` of it would have;
        a broken stream keeps what was committed before it. ``still_allowed``: whether the stream's token is
        still active, asked before and after each group's commit (:mod:`cache_server.auth.revocation`): once
        it is not, the stream ends with :class:`~cache_server.errors.TokenRevoked` and its group is not
        stored. ``uploader``: what the stream's ``X-Uploader`` declared, kept with each member.

        :class:`QuotaExceeded` at once when a quota of the namespace or the token is full; a member that
        would pass one is refused with it before any of its bytes are stored, its bytes skipped."""
        upload = self._writer.begin(namespace, stored_by=stored_by, still_allowed=still_allowed)
        if upload.allowance is not None and (full := upload.allowance.full()) is not None:
            raise full
        return _put_members(upload, members, self._writer, self._packs, uploader)


def _put_members(
    upload: Upload,
    members: Iterator[TarMember],
    writer: EntryWriter,
    packs: StoresPacks | None,
    uploader: str | None = None,
) -> BulkResult:
    """Store the members of one stream for ``upload``; see the module docstring."""
    results: list[MemberOutcome] = []
    group = _Group([])
    group_seconds = writer.max_group_seconds
    seen: set[str] = set()
    with (
        ThreadPoolExecutor(PACK_WRITERS, thread_name_prefix="xla-cache-pack-write") as pool,
        writer.batch() as batch,
    ):
        packer = PackWriter(packs, pool) if packs is not None else None

        def commit() -> None:
            nonlocal group
            writer.check_still_allowed(upload)  # a revoked token commits nothing more
            refused = _over_quota(upload, group, writer)  # the quotas as they are now
            _commit(upload, group, batch, packer, writer, refused)
            group = _Group([])

        try:
            for member in members:
                key = member.name
                try:
                    sha256, compile_ms = _member_fields(member)
                    if key in seen:
                        raise InvalidName(f"The key {key!r} appears twice in this upload.")
                    seen.add(key)
                    packed = packer is not None and packer.takes(member.size)
                    if (packed and packer is not None and packer.full()) or group.aged(group_seconds):
                        commit()  # before the member is admitted: a commit starts the quota's count anew
                    pending = writer.prepare(
                        upload,
                        key,
                        sha256,
                        size=member.size,
                        compile_time_ms=compile_ms,
                        uploader=uploader,
                        signature=member.pax.get(SIGNATURE_PAX),
                    )
                    tee = partial(packer.copying, key) if packed and packer is not None else None
                    pending.put_into(batch, member.chunks(), tee=tee)
                except EntryRefused as exc:  # before its commit: that member alone
                    results.append(MemberOutcome(key=key, error=exc))
                    continue
                outcome = MemberOutcome(key=key, size=member.size, sha256=sha256)
                results.append(outcome)
                if not group.pending:
                    group.opened = time.monotonic()
                group.pending.append((pending, outcome))
                group.bytes += member.size
                if (
                    len(group.pending) >= GROUP_ENTRIES
                    or group.bytes >= GROUP_BYTES
                    or group.aged(group_seconds)
                ):
                    commit()
            commit()
        except BaseException:
            if packer is not None:  # the stream broke: the packs of its last group would be orphans
                packer.abandon()
            raise
    return BulkResult(results)


def _over_quota(upload: Upload, group: _Group, writer: EntryWriter) -> set[str]:
    """At a group's commit: read the quotas again (one set or changed since the upload began applies from
    here) and admit the group's members again, in stream order; those past a quota get its
    :class:`~cache_server.errors.QuotaExceeded` as their outcome. Returns their blobs' names."""
    allowance = upload.allowance
    if allowance is None or not group.pending:
        return set()
    allowance.reread()
    if not allowance.limited:
        return set()
    stored: dict[str, EntryRef] | None = None

    def stored_same(pending: Pending) -> bool:  # one lookup for the group, and only if one is refused
        nonlocal stored
        if stored is None:
            stored = writer.stored_entries(upload.namespace, [p.key for p, _ in group.pending])
        row = stored.get(pending.key)
        return row is not None and row.sha256 == pending.sha256

    refused: set[str] = set()
    for pending, outcome in group.pending:
        size = pending.size if pending.size is not None else pending.received
        try:
            allowance.admit(size, stored=partial(stored_same, pending))
        except QuotaExceeded as exc:
            outcome.error = exc
            refused.add(pending.name)
    return refused


def _commit(
    upload: Upload,
    group: _Group,
    batch: BlobBatch,
    packer: PackWriter | None,
    writer: EntryWriter,
    refused: set[str],
) -> None:
    """Make the group's blobs (and its pack) durable, then write their rows; fill in each member's
    outcome. The ``refused`` members (past a quota at this commit) get no row, and their blobs created
    here are removed."""
    if packer is not None:
        packer.start()
    try:
        created = batch.commit() if group.pending else {}
    except BaseException:
        if packer is not None:
            packer.abandon()
        raise
    kept = [(p, outcome) for p, outcome in group.pending if p.name not in refused]
    writer.discard([p.name for p, _ in group.pending if p.name in refused and created.get(p.name)])
    located = packer.finish({p.key for p, _ in kept if created.get(p.name)}) if packer is not None else {}
    if not group.pending:
        return
    new: list[EntryRecord] = []
    found: list[EntryRecord] = []
    for pending, outcome in kept:
        pack, pack_offset = located.get(pending.key, (None, None))
        try:
            record, is_new = writer.settle(
                pending, bool(created.get(pending.name)), pack=pack, pack_offset=pack_offset
            )
        except _SETTLED_REFUSED as exc:
            outcome.error = exc
            continue
        outcome.stored = is_new
        (new if is_new else found).append(record)
    writer.commit(upload, new, found)
