"""The one writer of entries: the rules of storing an entry, which a single ``PUT`` and every member of a
bulk upload (:mod:`cache_server.service.bulk`) follow alike. They differ only in how they batch durability.

An upload is begun once per request (:meth:`EntryWriter.begin`: its namespace, its token, the quota it may
use, when it began). Each entry is then

1. *prepared* (:meth:`EntryWriter.prepare`): its key, declared size and compile time checked, admitted
   against the quotas (:mod:`cache_server.service.quotas`), its metadata made (one :class:`BlobMetadata`), and
   the rules for a blob already stored under its name made ready (:mod:`cache_server.service.taken_names`);
2. *put* into the store or a batch with :meth:`Pending.put_into`, create-only, its bytes checked as they
   stream (size limit, SHA-256);
3. *settled* once durable (:meth:`EntryWriter.settle`): a new entry's row, or the row of the blob found
   already stored (adopted), or :class:`~cache_server.errors.DigestConflict` /
   :class:`~cache_server.errors.EntryInFlight`;
4. *committed* with the others of its group (:meth:`EntryWriter.commit`): the index rows and the feed rows
   in one transaction, taken back if the token was revoked meanwhile (:mod:`cache_server.auth.revocation`),
   and only then announced (``on_stored``).

Blob first, then row: a crash between them leaves an orphan blob, never a row without bytes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cache_protocol import COMPILE_TIME_HEADER, MAX_COMPILE_TIME_MS, SHA256_HEADER, UPLOADER_MAX_LENGTH
from cache_protocol.text import unprintable
from cache_server.auth.revocation import StillAllowed, check_still_allowed, undo_if_revoked
from cache_server.domain import Clock, EntryInfo, EntryRef, utcnow
from cache_server.errors import BadRequest, CacheError, DigestMismatch, EntryTooLarge
from cache_server.index.entries import EntryRecord, EntryRepository
from cache_server.names import check_key, check_namespace
from cache_server.service.metadata import BlobMetadata
from cache_server.service.quotas import Quotas, UploadAllowance
from cache_server.service.taken_names import TakenName, conflict
from cache_server.service.upload_signatures import SignaturePolicy
from cache_server.settings import Settings
from cache_server.storage.abilities import BlobBatch
from cache_server.storage.base import BlobInfo, BlobStore, ReplaceJudge, blob_name
from cache_server.storage.batches import open_batch

__all__ = ["EntryWriter", "Pending", "PutResult", "StoredHook", "Upload"]

log = logging.getLogger(__name__)

StoredHook = Callable[[str, str], None]
"""Called with (namespace, key) after a new entry is stored; must be quick and must not raise."""


class _Puts(Protocol):
    """Where a blob is put: a :class:`BlobStore` or a :class:`~cache_server.storage.abilities.BlobBatch`."""

    def put(
        self,
        name: str,
        chunks: Iterable[bytes],
        metadata: dict[str, str],
        *,
        replace: ReplaceJudge | None = None,
    ) -> bool | None: ...


@dataclass(frozen=True)
class PutResult:
    """Outcome of a single upload: ``created`` is False when the same bytes were already stored."""

    created: bool
    namespace: str
    key: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Upload:
    """One upload request into ``namespace``: the token that sent it (``stored_by``, None with auth off),
    whether that token is still active (``still_allowed``), what its quotas still allow (``allowance``,
    None: no quota is checked), and when it began (real UTC, as the store dates blobs)."""

    namespace: str
    stored_by: str | None
    still_allowed: StillAllowed | None
    allowance: UploadAllowance | None
    began: dt.datetime


@dataclass
class Pending:
    """An entry prepared for the store: its blob's name and metadata, its size as declared (None: not
    known before its bytes are read), and the rules for a blob already stored under its name."""

    name: str
    metadata: BlobMetadata
    size: int | None
    taken: TakenName
    limit: int
    received: int = field(default=0)

    @property
    def key(self) -> str:
        return self.metadata.key

    @property
    def sha256(self) -> str:
        return self.metadata.sha256

    def put_into(
        self,
        target: _Puts,
        chunks: Iterable[bytes],
        *,
        tee: Callable[[Iterator[bytes]], Iterator[bytes]] | None = None,
    ) -> bool | None:
        """Put the bytes, checked as they stream (then through ``tee``, such as a pack's copy), create-only:
        what ``target.put`` answers (a store: whether it created the blob; a batch: None until its commit)."""
        checked = self._checked(chunks)
        return target.put(
            self.name,
            tee(checked) if tee is not None else checked,
            self.metadata.as_dict(),
            replace=self.taken.judge,
        )

    def _checked(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """The bytes, refused past the size limit (:class:`EntryTooLarge`) or when they do not hash to the
        announced digest (:class:`DigestMismatch`); either way nothing of the blob is kept."""
        digest = hashlib.sha256()
        for chunk in chunks:
            self.received += len(chunk)
            if self.received > self.limit:
                raise EntryTooLarge(
                    f"The entry is larger than the limit of {self.limit} bytes; nothing was stored."
                )
            digest.update(chunk)
            yield chunk
        if digest.hexdigest() != self.sha256:
            raise DigestMismatch(
                f"The body's SHA-256 is {digest.hexdigest()}, not {self.sha256} as {SHA256_HEADER} says; "
                "nothing was stored."
            )


class EntryWriter:
    """Stores entries into one blob store and the index's :class:`EntryRepository`; see the module
    docstring. ``quotas``: None checks none. ``on_stored`` hears of each new entry once its row is
    written. ``clock``: the times written to the index and the metadata. ``signatures``: which namespaces
    require signed entries, and the keys checked (:mod:`cache_server.service.upload_signatures`; None: built
    from the settings)."""

    def __init__(
        self,
        settings: Settings,
        entries: EntryRepository,
        store: BlobStore,
        *,
        on_stored: StoredHook,
        clock: Clock = utcnow,
        quotas: Quotas | None = None,
        signatures: SignaturePolicy | None = None,
    ) -> None:
        self._settings = settings  # read at each upload: a test may change a limit of a running server
        self._signatures = signatures if signatures is not None else SignaturePolicy.from_settings(settings)
        self._entries = entries
        self._store = store
        self._on_stored = on_stored
        self._clock = clock
        self._quotas = quotas

    @property
    def max_group_seconds(self) -> float:
        """How long a group of a bulk upload may stay open: a quarter of ``XLA_CACHE_ORPHAN_GRACE_SECONDS``,
        so that its blobs (visible at once on GCS) and temp files get their rows well within the grace
        period, before gc and other uploads take them for the leftovers of a dead upload."""
        return self._settings.orphan_grace_seconds / 4

    def batch(self) -> BlobBatch:
        """A batch of puts into the store (:func:`~cache_server.storage.batches.open_batch`)."""
        return open_batch(self._store)

    def check_size(self, declared: int | None) -> None:
        """Refuse at once an entry whose declared length is over ``XLA_CACHE_MAX_ENTRY_BYTES``."""
        limit = self._settings.max_entry_bytes
        if declared is not None and declared > limit:
            raise EntryTooLarge(
                f"The entry is {declared} bytes; the limit is {limit} bytes (XLA_CACHE_MAX_ENTRY_BYTES)."
            )

    def begin(self, namespace: str, *, stored_by: str | None, still_allowed: StillAllowed | None) -> Upload:
        """Start an upload into ``namespace``: its quotas read once. :class:`QuotaExceeded` when the
        namespace is new and the token may create no more."""
        check_namespace(namespace)
        allowance = self._quotas.allowance(namespace, stored_by) if self._quotas is not None else None
        return Upload(namespace, stored_by, still_allowed, allowance, began=utcnow())

    def prepare(
        self,
        upload: Upload,
        key: str,
        sha256: str,
        *,
        size: int | None,
        compile_time_ms: int | None = None,
        uploader: str | None = None,
        signature: str | None = None,
        row: EntryInfo | None = None,
        row_known: bool = False,
    ) -> Pending:
        """Check one entry (its signature too: :mod:`cache_server.service.upload_signatures`) and admit it
        against the upload's quotas, before any of its bytes is read.

        ``row``: the key's index row when the caller looked it up (``row_known``): another digest there is
        a :class:`DigestConflict` at once. Raises the :class:`CacheError` the entry is refused with.
        """
        check_key(key)
        self.check_size(size)
        if compile_time_ms is not None and not 0 <= compile_time_ms <= MAX_COMPILE_TIME_MS:
            raise BadRequest(
                f"{COMPILE_TIME_HEADER} must be a whole number of milliseconds, 0 to {MAX_COMPILE_TIME_MS}."
            )
        if uploader and (problem := unprintable(uploader)):
            raise BadRequest(f"X-Uploader: {problem}.")
        namespace = upload.namespace
        signature, signer = self._signatures.check(namespace, key, sha256, signature)
        if row_known and row is not None and row.sha256 != sha256:
            raise conflict(namespace, key, row.sha256)
        if upload.allowance is not None:  # the declared length, or 0 when unknown (grown once measured)
            upload.allowance.admit(
                size or 0,
                stored=lambda: row is not None if row_known else self._stored_same(namespace, key, sha256),
            )
        metadata = BlobMetadata(
            namespace=namespace,
            key=key,
            sha256=sha256,
            created=self._clock(),
            compile_time_ms=compile_time_ms,
            uploader=uploader[:UPLOADER_MAX_LENGTH] if uploader else None,
            stored_by=upload.stored_by,
            signature=signature,
            signer=signer,
        )
        taken = TakenName(
            self._entries,
            self._store,
            namespace,
            key,
            sha256,
            began=upload.began,
            grace_seconds=self._settings.orphan_grace_seconds,
            clock=utcnow,  # the store's times (real UTC), which a blob's creation time is in
            row=row,
            row_known=row_known,
        )
        return Pending(blob_name(namespace, key), metadata, size, taken, self._settings.max_entry_bytes)

    def _stored_same(self, namespace: str, key: str, sha256: str) -> bool:
        """Whether the key is stored with this digest already (an entry that adds nothing to a quota)."""
        row = self._entries.get_entry(namespace, key)
        return row is not None and row.sha256 == sha256

    def stored_entries(self, namespace: str, keys: Sequence[str]) -> dict[str, EntryRef]:
        """The rows of these keys that are stored, by key."""
        return self._entries.get_entries(namespace, keys)

    def discard(self, names: Sequence[str]) -> None:
        """Remove blobs put for entries refused before any row of theirs was written (one that cannot be
        removed now is an orphan gc removes)."""
        for name in names:
            try:
                self._store.delete(name)
            except CacheError as exc:
                log.warning("could not remove the refused blob %s: %s", name, exc.detail)

    def put_entry(
        self,
        namespace: str,
        key: str,
        chunks: Iterable[bytes],
        *,
        sha256: str,
        declared_size: int | None = None,
        compile_time_ms: int | None = None,
        uploader: str | None = None,
        signature: str | None = None,
        stored_by: str | None = None,
        still_allowed: StillAllowed | None = None,
    ) -> PutResult:
        """Store one entry on its own (a ``PUT``): blob first (create-only), then its row.

        ``stored_by`` is the id of the token that sent it, kept with the entry (and in the blob's metadata,
        for reindex) so that everything one token stored can be found and removed. ``still_allowed``: whether
        that token is still active, asked once the row is written (:mod:`cache_server.auth.revocation`).
        """
        upload = self.begin(namespace, stored_by=stored_by, still_allowed=still_allowed)  # checks the name
        existing = self._entries.get_entry(namespace, key)  # another digest: refused before the body
        pending = self.prepare(
            upload,
            key,
            sha256,
            size=declared_size,
            compile_time_ms=compile_time_ms,
            uploader=uploader,
            signature=signature,
            row=existing,
            row_known=True,
        )
        created = bool(pending.put_into(self._store, chunks))
        if created and declared_size is None and upload.allowance is not None and existing is None:
            self._grow(upload.allowance, pending)  # (restoring its own row's blob adds nothing)
        record, new = self.settle(pending, created)
        self.commit(upload, [record] if new else [], [] if new else [record])
        return PutResult(created=new, namespace=namespace, key=key, size=record.size, sha256=record.sha256)

    def _grow(self, allowance: UploadAllowance, pending: Pending) -> None:
        """An entry of unknown length, measured once stored: over a quota, its blob is removed before any
        row is written, and :class:`QuotaExceeded` raised."""
        try:
            allowance.grow(pending.received)
        except CacheError:
            self._store.delete(pending.name)
            raise

    def settle(
        self, pending: Pending, created: bool, *, pack: str | None = None, pack_offset: int | None = None
    ) -> tuple[EntryRecord, bool]:
        """The row of an entry whose put is durable, and whether it is new: created (its own bytes), or the
        blob already stored holds the same bytes (adopted). Raises
        :class:`~cache_server.errors.DigestConflict` or :class:`~cache_server.errors.EntryInFlight`
        otherwise (:meth:`TakenName.outcome`)."""
        if created:
            return pending.metadata.record(pending.received, pack=pack, pack_offset=pack_offset), True
        info = pending.taken.outcome().info
        return _found(pending, info).record(info.size), False

    def commit(self, upload: Upload, new: list[EntryRecord], found: list[EntryRecord]) -> None:
        """Write the rows of one group (and the feed rows of its new entries), take them back if the token
        was revoked meanwhile, then announce the new ones. A found blob's row comes back uncounted."""
        self._entries.record_new_entries(new)
        if found:
            self._entries.add_missing_entries(found)
        # ... with the rows adopted from orphans this token left (a purge that ran before they were written
        # did not see them)
        token = upload.stored_by
        adopted = [record for record in found if token is not None and record.stored_by == token]
        undo_if_revoked(upload.still_allowed, new + adopted, entries=self._entries, store=self._store)
        for record in new:
            self._on_stored(record.namespace, record.key)

    @staticmethod
    def check_still_allowed(upload: Upload) -> None:
        """:class:`~cache_server.errors.TokenRevoked` once the upload's token is revoked: commit no more."""
        check_still_allowed(upload.still_allowed)


def _found(pending: Pending, info: BlobInfo) -> BlobMetadata:
    """The facts of a blob found stored with the upload's bytes, as its metadata tells them (those of this
    upload where it cannot)."""
    try:
        return BlobMetadata.of(info)
    except (CacheError, ValueError):
        return pending.metadata
