"""Packing later: copies in packs for the small entries that were stored without one.

A bulk upload packs its small members as it stores them (:mod:`cache_server.service.packs`), but an entry
stored by a ``PUT``, by a bulk upload of fewer than :data:`~cache_server.service.packs.PACK_MIN_MEMBERS` small
members (the in-job uploader's usual pass when compiles are slow), by ``reindex``, or before packing was
turned on has none, and a bundle from a remote store reads it with a request of its own. :class:`LoosePacker`
finds such entries a page at a time, in (namespace, key) order, reads each one's own blob, checks it against
its SHA-256 and size, writes the good ones of a namespace into packs of up to
:data:`~cache_server.service.packs.PACK_BYTES` (never fewer than ``PACK_MIN_MEMBERS`` copies in one), and then
points their rows into the pack, only where a row still has no pack and the same digest: an entry deleted,
stored again with other bytes, or packed by another process meanwhile is left alone. A pack no row came to
point into is deleted at once; a crash between the write and the rows leaves a pack no row points into,
which gc deletes, as for a bulk upload. The own blobs stay the truth, as always.

Pages: rounds go on from where the last one stopped (the background's and ``POST /admin/pack``'s alike)
and start over after the last loose entry. A full page ends before its last namespace's entries unless
they fill it, so that the loose entries of one namespace are packed together, not split into groups too
small to pack.

The server does this in the background (every ``XLA_CACHE_PACK_INTERVAL_SECONDS``, a page per round, the
first round after a random 0.5 to 1.5 times the interval, so that the workers of one server do not go in
step) on a store that packs, and ``POST /admin/pack`` does it now. An entry whose blob is missing or
damaged is left as it is and not read again by this process for :data:`UNREADABLE_RETRY_SECONDS` (the
read paths deal with it). A store that fails (unreachable) ends the round; its page is tried again the
next round.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby

from cache_server import metrics
from cache_server.domain import EntryInfo
from cache_server.index.admin import AdminRepository
from cache_server.service.packs import PACK_BYTES, PACK_MEMBER_BYTES, PACK_MIN_MEMBERS, holds_entry
from cache_server.storage.abilities import StoresPacks
from cache_server.storage.base import BlobStore, blob_name
from cache_server.storage.reading import open_many

__all__ = ["PAGE_ENTRIES", "UNREADABLE_RETRY_SECONDS", "LoosePacker", "PackingResult"]

log = logging.getLogger(__name__)

PAGE_ENTRIES = 4096
"""Loose entries looked at per round."""
UNREADABLE_MEMORY = 16_384
"""Entries whose blob could not be packed, remembered so that later rounds do not read them again."""
UNREADABLE_RETRY_SECONDS = 3600.0
"""How long such an entry is left alone (it may be stored again, with the same bytes, meanwhile)."""


@dataclass
class PackingResult:
    """What one or more rounds did."""

    entries_checked: int = 0
    entries_packed: int = 0
    packs_written: int = 0
    pack_bytes_written: int = 0
    unreadable: int = 0
    done: bool = False  # the pass reached the last loose entry (the next round starts over)

    def add(self, other: PackingResult) -> None:
        self.entries_checked += other.entries_checked
        self.entries_packed += other.entries_packed
        self.packs_written += other.packs_written
        self.pack_bytes_written += other.pack_bytes_written
        self.unreadable += other.unreadable
        self.done = other.done


class LoosePacker:
    """Gives the small entries stored without a copy in a pack one, a page of entries per :meth:`round`.

    ``store`` must keep packs (:class:`StoresPacks`). One thread at a time (the caller takes turns);
    :meth:`stop` may come from any thread and ends the round in progress after its current pack.
    """

    def __init__(
        self,
        repository: AdminRepository,
        store: BlobStore,
        *,
        page: int = PAGE_ENTRIES,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(store, StoresPacks):
            raise TypeError(f"{type(store).__name__} keeps no packs")
        self._repository = repository
        self._store: StoresPacks = store
        self._blobs: BlobStore = store
        self._page = page
        self._monotonic = monotonic
        self._after: tuple[str, str] | None = None
        self._unreadable: dict[tuple[str, str, str], float] = {}  # (namespace, key, digest) -> when
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def run(self, max_entries: int, max_seconds: float = float("inf")) -> PackingResult:
        """Rounds until the pass reaches the last loose entry, ``max_entries`` were looked at, or
        ``max_seconds`` went by (checked after each round)."""
        total = PackingResult()
        started = self._monotonic()
        while total.entries_checked < max_entries and not self._stopping.is_set():
            total.add(self.round(min(self._page, max_entries - total.entries_checked)))
            if total.done or self._monotonic() - started >= max_seconds:
                break
        return total

    def round(self, limit: int | None = None) -> PackingResult:
        """Look at the next page of loose entries and pack what can be packed."""
        limit = limit or self._page
        result = PackingResult()
        page = self._repository.loose_entries(max_size=PACK_MEMBER_BYTES, after=self._after, limit=limit)
        result.done = len(page) < limit
        if not result.done and page[0].namespace != page[-1].namespace:
            # A full page: its last namespace may go on in the next page; pack its entries together there.
            last = page[-1].namespace
            page = [entry for entry in page if entry.namespace != last]
        result.entries_checked = len(page)
        now = self._monotonic()
        for _, entries in groupby(page, key=lambda entry: entry.namespace):
            group = [entry for entry in entries if not self._left_alone(entry, now)]
            if len(group) >= PACK_MIN_MEMBERS and not self._stopping.is_set():
                self._pack(group, result)
        # Only now: a round the store broke (it raised) is tried again from the same place.
        self._after = None if result.done else (page[-1].namespace, page[-1].key)
        return result

    def _left_alone(self, entry: EntryInfo, now: float) -> bool:
        since = self._unreadable.get((entry.namespace, entry.key, entry.sha256))
        return since is not None and now - since < UNREADABLE_RETRY_SECONDS

    def _remember_unreadable(self, entry: EntryInfo) -> None:
        if len(self._unreadable) >= UNREADABLE_MEMORY:
            del self._unreadable[next(iter(self._unreadable))]  # the oldest
        self._unreadable[(entry.namespace, entry.key, entry.sha256)] = self._monotonic()

    def _pack(self, entries: Sequence[EntryInfo], result: PackingResult) -> None:
        """Pack the entries of one namespace, a pack at a time."""
        pieces: list[bytes] = []
        copies: list[tuple[EntryInfo, int]] = []
        size = 0
        for entry, content in self._read(entries, result):
            if copies and size + entry.size > PACK_BYTES:
                self._write(pieces, copies, result)
                pieces, copies, size = [], [], 0
                if self._stopping.is_set():
                    return
            copies.append((entry, size))
            pieces.append(content)
            size += entry.size
        self._write(pieces, copies, result)

    def _read(self, entries: Sequence[EntryInfo], result: PackingResult) -> Iterator[tuple[EntryInfo, bytes]]:
        """Each entry whose own blob holds exactly its bytes, with them (others are remembered)."""
        blobs = [(blob_name(entry.namespace, entry.key), entry.size) for entry in entries]
        readers = open_many(self._blobs, blobs)  # as many at once as the store reads ahead
        for entry, reader in zip(entries, readers, strict=True):
            content = None
            if reader is not None:
                with reader:
                    content = _checked(entry, reader.chunks())
            if content is None:
                result.unreadable += 1
                self._remember_unreadable(entry)
                log.warning("not packing %s/%s: its blob is gone or damaged", entry.namespace, entry.key)
                continue
            yield entry, content

    def _write(self, pieces: list[bytes], copies: list[tuple[EntryInfo, int]], result: PackingResult) -> None:
        if len(copies) < PACK_MIN_MEMBERS:
            return
        pack_id = uuid.uuid4().hex
        self._store.put_pack(pack_id, pieces)
        placed = self._repository.place_copies(pack_id, copies)
        if not placed:  # every entry went (or was packed elsewhere) meanwhile
            self._store.delete_pack(pack_id)
            return
        result.packs_written += 1
        result.entries_packed += placed
        metrics.PACKED_LATER.inc(placed)  # here: a round that fails later still counts what it placed
        result.pack_bytes_written += sum(len(piece) for piece in pieces)


def _checked(entry: EntryInfo, chunks: Iterator[bytes]) -> bytes | None:
    """The blob's bytes if they are exactly the entry's (size and SHA-256), else None."""
    held: list[bytes] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > entry.size:
            return None
        held.append(chunk)
    content = b"".join(held)
    return content if holds_entry(content, entry) else None
