"""Packs: copies of many small entries in one object, so that a bundle from a remote store reads them with a
few ranged requests instead of one request per entry (on GCS each request costs a round trip of tens of
milliseconds, and CPU on both ends).

**Writing.** A bulk upload (:mod:`cache_server.service.bulk`) into a store that packs keeps a copy of each
member of at most :data:`PACK_MEMBER_BYTES` once every byte of it has passed its checks, and seals the copies
into a pack of up to :data:`PACK_BYTES`, written under a new random id while the stream goes on. At the
group's commit the rest are sealed, the batch makes the members' own blobs durable, and the group's rows are
written after both, each new row with its copy's pack and offset, so a row never points into a pack that is
not there. The pack is extra: every entry is still stored on its own (single GETs, signed URLs, reindex and
eviction use that), so a pack that fails to write costs speed, never an entry. A pack holding no new entry, or
written for a group that was never committed, is deleted at once; a crash leaves at worst a pack that no row
points into, which gc deletes. Small entries stored without a copy (a PUT, a bulk upload of fewer than
:data:`PACK_MIN_MEMBERS`) get one later, in the background (:mod:`cache_server.admin.packing`).

**Reading.** A bundle reads the entries with a copy pack by pack, in offset order, neighbours joined into
one ranged read while the gap between them is at most :data:`RUN_GAP` bytes (reading a gap costs less than
a round trip) and the read at most :data:`RUN_BYTES`, a few reads in flight. Every copy is checked against
its entry's SHA-256 before a byte of it is sent. A pack that is gone or holds a copy that fails the check is
forgotten (no row points into it any more) and deleted, and its entries are read from their own blobs, as
entries without a copy are; a pack the store cannot serve for now is only skipped.

**Space.** A deleted or evicted entry's copy stays in its pack until no row points into the pack; gc (and
budget eviction) then deletes the pack. Packs are not rewritten to reclaim the space of partly evicted ones,
so the space they take is not bounded by the budgets, which count entries.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from cache_server.domain import EntryInfo, EntryRef
from cache_server.storage.abilities import StoresPacks
from cache_server.storage.base import MIB

__all__ = [
    "GROUP_PACK_BYTES",
    "PACK_BYTES",
    "PACK_MEMBER_BYTES",
    "PACK_MIN_MEMBERS",
    "RUN_BYTES",
    "RUN_GAP",
    "PackWriter",
    "holds_entry",
    "packing_store",
    "read_copies",
]

log = logging.getLogger(__name__)

PACK_MEMBER_BYTES = 1 * MIB
"""The largest member that gets a copy in a pack (larger ones are few, and cost a round trip each anyway)."""
PACK_BYTES = 8 * MIB
"""A pack is sealed, and its upload begun, before its copies would pass this size."""
GROUP_PACK_BYTES = 32 * MIB
"""A bulk upload's group is committed once this many bytes of copies wait for it (they are held in memory)."""
PACK_MIN_MEMBERS = 4
"""Fewer copies than this make no pack: one more object would save too few requests."""
PACK_WRITERS = 4
"""Packs of one bulk upload written at once."""
RUN_GAP = 1 * MIB
"""Two copies in one pack are read together if at most this many unwanted bytes lie between them."""
RUN_BYTES = 8 * MIB
"""The most bytes one ranged read of a pack asks for (a single larger copy is still read, alone)."""
RUN_WORKERS = 4
"""Ranged reads of one bundle in flight at once (so at most this many times RUN_BYTES held)."""


def holds_entry(data: bytes, entry: EntryInfo | EntryRef) -> bool:
    """Whether ``data`` is exactly the entry's bytes (its size and SHA-256): checked before a copy goes
    into a pack and before one is sent."""
    return len(data) == entry.size and hashlib.sha256(data).hexdigest() == entry.sha256


def packing_store(store: object, enabled: bool | None) -> StoresPacks | None:
    """``store`` if packs are to be written and read there: it can keep them, and ``enabled`` (the
    ``XLA_CACHE_PACKS`` setting) says so, or is None and packing pays on that store."""
    if not isinstance(store, StoresPacks):
        return None
    return store if (store.packs_by_default if enabled is None else enabled) else None


class PackWriter:
    """The copies of one group of a bulk upload, and the packs they become.

    Use: wrap each member's checked chunks with :meth:`copying` when :meth:`takes` it, and commit the group
    first when the writer is :meth:`full`. A pack is sealed and written (on the pool) as soon as it holds
    :data:`PACK_BYTES`; at the group's commit call :meth:`start` (seals the rest) before making the blobs
    durable, then :meth:`finish` with the keys the commit created, for where their copies lie, or
    :meth:`abandon` if the commit or the stream failed.
    """

    def __init__(self, store: StoresPacks, pool: ThreadPoolExecutor) -> None:
        self._store = store
        self._pool = pool
        self._pieces: list[bytes] = []
        self._offsets: dict[str, int] = {}
        self._size = 0
        self._held = 0  # bytes of the group's copies, sealed or not
        self._sealed: list[tuple[str, dict[str, int], Future[None]]] = []

    @staticmethod
    def takes(size: int) -> bool:
        """Whether a member of ``size`` bytes gets a copy."""
        return size <= PACK_MEMBER_BYTES

    def full(self) -> bool:
        """Whether the group should be committed before another copy is made (bounds what is held)."""
        return self._held >= GROUP_PACK_BYTES

    def copying(self, key: str, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """``chunks`` as they are; a copy is kept once the last has passed (a member whose checks raise,
        or that is not read to its end, leaves none)."""
        held: list[bytes] = []
        for chunk in chunks:
            held.append(chunk)
            yield chunk
        size = sum(len(piece) for piece in held)
        if self._offsets and self._size + size > PACK_BYTES:
            self._seal()
        self._offsets[key] = self._size
        self._pieces.extend(held)
        self._size += size
        self._held += size

    def _seal(self) -> None:
        pieces, offsets = self._pieces, self._offsets
        self._pieces, self._offsets, self._size = [], {}, 0
        if len(offsets) >= PACK_MIN_MEMBERS:
            pack_id = uuid.uuid4().hex
            self._sealed.append((pack_id, offsets, self._pool.submit(self._store.put_pack, pack_id, pieces)))

    def start(self) -> None:
        """Seal the copies not yet in a pack (the group is about to be committed)."""
        self._seal()

    def _written(self) -> Iterator[tuple[str, dict[str, int]]]:
        """Wait for the group's packs; each one written, with its copies' offsets (failures logged)."""
        sealed, self._sealed, self._held = self._sealed, [], 0
        for pack_id, offsets, future in sealed:
            try:
                future.result()
            except Exception:  # a pack is extra: the entries are stored without it
                log.warning("could not write pack %s of %d entries", pack_id, len(offsets), exc_info=True)
                continue
            yield pack_id, offsets

    def finish(self, created: Container[str]) -> dict[str, tuple[str, int]]:
        """Wait for the group's packs: where the copy of each ``created`` key lies. A pack holding none
        (its entries were all stored before) is deleted again."""
        located: dict[str, tuple[str, int]] = {}
        for pack_id, offsets in self._written():
            mine = {key: (pack_id, offset) for key, offset in offsets.items() if key in created}
            if mine:
                located.update(mine)
            else:
                self._delete(pack_id)
        return located

    def abandon(self) -> None:
        """The group was not committed: forget its copies, and delete the packs already written."""
        self._pieces, self._offsets, self._size = [], {}, 0
        for pack_id, _ in self._written():
            self._delete(pack_id)

    def _delete(self, pack_id: str) -> None:
        try:
            self._store.delete_pack(pack_id)
        except Exception:  # left for gc
            log.warning("could not delete unused pack %s", pack_id, exc_info=True)


@dataclass
class _Run:
    """One ranged read of a pack and the copies it holds."""

    pack: str
    start: int
    end: int
    members: list[tuple[EntryRef, int]] = field(default_factory=list)  # entry, offset in the pack


def _plan(by_pack: Mapping[str, list[tuple[int, EntryRef]]]) -> list[_Run]:
    """The ranged reads of the copies, given by pack as (offset, entry)."""
    runs: list[_Run] = []
    for pack, members in by_pack.items():
        run: _Run | None = None
        for offset, entry in sorted(members, key=lambda member: member[0]):
            end = offset + entry.size
            if run is None or offset - run.end > RUN_GAP or max(end, run.end) - run.start > RUN_BYTES:
                run = _Run(pack, offset, end)
                runs.append(run)
            run.end = max(run.end, end)
            run.members.append((entry, offset))
    return runs


def read_copies(
    store: StoresPacks, entries: Sequence[EntryRef], forget: Callable[[Sequence[str]], object]
) -> Iterator[tuple[EntryRef, bytes | None]]:
    """Each of ``entries`` with its copy's checked bytes, or None where it has no usable copy (then read the
    entry's own blob): first those without a copy, in the order given, then the others in pack order. A
    pack found gone or damaged is given to ``forget`` (which lets no row point into it) and then deleted;
    one that could not be read (the store unreachable) is only skipped."""
    by_pack: dict[str, list[tuple[int, EntryRef]]] = defaultdict(list)
    for entry in entries:
        if entry.pack is None or entry.pack_offset is None:
            yield entry, None
        else:
            by_pack[entry.pack].append((entry.pack_offset, entry))
    if not by_pack:
        return
    runs = _plan(by_pack)
    skipped: set[str] = set()
    pool = ThreadPoolExecutor(RUN_WORKERS, thread_name_prefix="xla-cache-pack-read")
    window: deque[tuple[_Run, Future[bytes | None]]] = deque()
    upcoming = iter(runs)
    try:
        for _ in runs:
            while len(window) < RUN_WORKERS and (run := next(upcoming, None)) is not None:
                window.append((run, pool.submit(store.read_pack, run.pack, run.start, run.end - run.start)))
            run, future = window.popleft()
            try:
                data = future.result()
            except Exception:  # unreachable for now: the entries' own blobs may still be read
                log.warning("could not read pack %s", run.pack, exc_info=True)
                skipped.add(run.pack)  # left in the index: it may be back soon
                data = None
            for entry, offset in run.members:
                at = offset - run.start
                copy = None if data is None else data[at : at + entry.size]
                if copy is not None and not holds_entry(copy, entry):
                    copy = None
                if copy is None and run.pack not in skipped:
                    skipped.add(run.pack)
                    _drop(store, run.pack, forget)
                yield entry, copy
    finally:
        # A bundle cut short (the client gone) must not wait here for the reads in flight: they end alone.
        pool.shutdown(wait=False, cancel_futures=True)


def _drop(store: StoresPacks, pack_id: str, forget: Callable[[Sequence[str]], object]) -> None:
    """A pack found gone or damaged: no row points into it any more, then it is deleted (best effort: the
    bundle goes on from the entries' own blobs whatever happens here)."""
    log.warning("pack %s is gone or damaged: its entries are read on their own", pack_id)
    try:
        forget([pack_id])
        store.delete_pack(pack_id)
    except Exception:
        log.warning("could not drop pack %s (gc will)", pack_id, exc_info=True)
