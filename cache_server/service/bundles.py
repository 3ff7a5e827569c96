"""Many entries of a namespace at once: which keys it lacks, the manifest of those worth warming, and the
bundle: one tar stream of many entries (member name = key, each with its SHA-256 as a PAX record), read
from their packs where they have a copy (:mod:`cache_server.service.packs`), verified while they stream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence

from cache_protocol import BUNDLE_SHA256_PAX
from cache_protocol.signing import SIGNATURE_PAX
from cache_protocol.tar import BLOCK, END, member_header, padding
from cache_server.background.access import AccessRecorder
from cache_server.domain import EntryRef
from cache_server.index.entries import EntryRepository
from cache_server.names import check_keys, check_namespace
from cache_server.service.packs import read_copies
from cache_server.service.reads import WHOLE_READ_BYTES
from cache_server.service.verify import CorruptBlob, ReadChecker
from cache_server.settings import Settings
from cache_server.storage.abilities import StoresPacks
from cache_server.storage.base import BlobStore, blob_name
from cache_server.storage.reading import open_many
from cache_server.streams import coalesce

__all__ = ["Bundles"]

log = logging.getLogger(__name__)


class Bundles:
    """Reads of many entries over the index's :class:`EntryRepository` and one store (``packs``: the same
    store where it keeps packs); ``access`` counts each member sent as a hit and each absent key as a miss."""

    def __init__(
        self,
        entries: EntryRepository,
        store: BlobStore,
        *,
        settings: Settings,
        access: AccessRecorder,
        verifier: ReadChecker,
        packs: StoresPacks | None,
    ) -> None:
        self._settings = settings
        self._entries = entries
        self._store = store
        self._access = access
        self._verifier = verifier
        self._packs = packs

    def missing(self, namespace: str, keys: Sequence[str]) -> list[str]:
        """Which of ``keys`` the namespace lacks."""
        check_namespace(namespace)
        return self._entries.missing_keys(namespace, check_keys(keys, self._settings.max_keys_per_request))

    def manifest(
        self, namespace: str, *, max_bytes: int | None = None, max_entries: int | None = None
    ) -> list[EntryRef]:
        """The entries worth warming, most useful first, within the bounds."""
        return self._entries.manifest(
            check_namespace(namespace), max_bytes=max_bytes, max_entries=max_entries
        )

    def bundle(self, namespace: str, keys: Sequence[str]) -> Iterator[bytes]:
        """A tar stream of the stored entries among ``keys`` (member name = key); absent keys are left out.

        Checks run before the first byte; each member's bytes are verified while they stream.
        """
        check_namespace(namespace)
        wanted = check_keys(keys, self._settings.max_keys_per_request)
        rows = self._entries.get_entries(namespace, wanted)
        missing = len(wanted) - len(rows)
        if missing:
            self._access.miss(namespace, missing)
        return coalesce(self._tar_stream(namespace, [rows[key] for key in wanted if key in rows]))

    def _tar_stream(self, namespace: str, entries: list[EntryRef]) -> Iterator[bytes]:
        """The members: first those with a usable copy in a pack (:mod:`cache_server.service.packs`), in pack
        order, then the others in order, the next small ones read meanwhile on a remote store. Each member
        sent is a hit, counted when the stream ends or breaks."""
        served: list[tuple[str, int]] = []
        try:
            yield from self._members(entries, served)
        except (
            CorruptBlob
        ) as exc:  # a large member, streamed: its bytes went bad midway; the stream ends short
            log.warning("bundle of %s ended short: %s", namespace, exc)
        finally:
            self._access.hits(namespace, served)

    def _members(self, entries: list[EntryRef], served: list[tuple[str, int]]) -> Iterator[bytes]:
        if self._packs is not None:
            rest: list[EntryRef] = []
            for entry, copy in read_copies(self._packs, entries, self._entries.forget_packs):
                if copy is None:
                    rest.append(entry)
                else:
                    yield from self._member(entry, (copy,), served)
            entries = rest
        readers = open_many(self._store, [(blob_name(e.namespace, e.key), e.size) for e in entries])
        left_out: list[str] = []
        for entry, reader in zip(entries, readers, strict=True):
            if reader is None:
                log.warning(
                    "index row without blob: %s/%s (left out of the bundle)", entry.namespace, entry.key
                )
                continue
            body: Iterable[bytes] = self._verifier.verified(entry, reader)
            if entry.size <= WHOLE_READ_BYTES:  # checked whole before its header: a bad one is left out
                try:
                    body = (b"".join(body),)
                except CorruptBlob:  # dropped from the index by the check; the client compiles it
                    left_out.append(entry.key)
                    continue
            yield from self._member(entry, body, served)
        if left_out:
            log.warning(
                "left %d corrupt entries out of a bundle of %s (dropped; their next upload stores them): %s",
                len(left_out),
                entries[0].namespace,
                ", ".join(left_out[:5]) + (", ..." if len(left_out) > 5 else ""),
            )
        yield END

    @staticmethod
    def _member(entry: EntryRef, body: Iterable[bytes], served: list[tuple[str, int]]) -> Iterator[bytes]:
        """One member of a bundle (added to ``served``): tar header, SHA-256 (and signature) as PAX records,
        its bytes."""
        served.append((entry.key, entry.size))
        records = {BUNDLE_SHA256_PAX: entry.sha256}
        if entry.signature:
            records[SIGNATURE_PAX] = entry.signature
        yield member_header(entry.key, entry.size, int(entry.created_at.timestamp()), records)
        yield from body
        if entry.size % BLOCK:
            yield padding(entry.size)
