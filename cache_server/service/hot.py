"""Entries this process read a moment ago, kept in memory so that the next reads skip the index and the store.

A single GET costs most of its time in getting there: a hop to a worker thread (the event loop must not
wait on the database or the disk), the index lookup, and the read of the blob. When many jobs of a fleet
ask for the same new executable within a second, or one job asks for an entry again, those costs repeat
for the same answer. :class:`HotEntries` keeps what a read found (the index row, and the bytes of an entry
of at most :data:`~cache_server.service.reads.WHOLE_READ_BYTES`, already checked against its digest) for
``ttl`` seconds from the moment the index was read (:meth:`HotEntries.stamp`, taken before the lookup),
within a budget of ``capacity`` bytes, least recently used first out. A lookup takes no I/O and no lock
wait worth the name, so the route answers from it on the event loop itself.

What a memory copy can be behind by: an entry removed through *this* process (a delete, an eviction, a
purge, a namespace removed, gc dropping a row whose blob is gone, a damaged blob dropped) is forgotten at
once, and a read that was under way meanwhile keeps nothing (every removal moves a counter the read's
stamp holds); one removed through another worker process or another replica is served from here for at
most ``ttl`` seconds after this process read the index (the verified bytes it had then). A key stored anew
through this process drops its copy. A blob damaged on disk after its read is found by the first read
after the copy expires. ``capacity`` or ``ttl`` 0 turns it off.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cache_server.domain import EntryInfo

__all__ = ["HotEntries", "HotEntry", "ReadStamp"]

ITEM_OVERHEAD = 600
"""Bytes counted for each item besides its content and its strings: the row and item objects, the
dictionary slot, the key tuple."""


@dataclass(frozen=True)
class ReadStamp:
    """When a read began, for :meth:`HotEntries.put`: the removals counted so far, and the clock."""

    removals: int
    at: float


@dataclass(frozen=True)
class HotEntry:
    """An entry's index row, and its bytes (checked) when they were read whole; ``None`` for a larger one."""

    entry: EntryInfo
    content: bytes | None
    expires: float
    cost: int


def _cost(entry: EntryInfo, content: bytes | None) -> int:
    strings = (entry.namespace, entry.key, entry.sha256, entry.uploader, entry.stored_by, entry.pack)
    return (
        ITEM_OVERHEAD
        + sum(len(text) for text in strings if text is not None)
        + (len(content) if content is not None else 0)
    )


class HotEntries:
    """A byte-bounded, time-bounded LRU of recently read entries. Thread-safe."""

    def __init__(self, capacity: int, ttl: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = capacity
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, str], HotEntry] = OrderedDict()
        self._bytes = 0
        self._removals = 0

    @property
    def enabled(self) -> bool:
        return self._capacity > 0 and self._ttl > 0

    @property
    def size_bytes(self) -> int:
        """What the items count against the capacity now."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def stamp(self) -> ReadStamp:
        """Taken by a read before it looks the entry up in the index; handed to :meth:`put` afterwards."""
        with self._lock:
            return ReadStamp(self._removals, self._clock())

    def get(self, namespace: str, key: str) -> HotEntry | None:
        """The item for this entry, unless there is none or it has expired (then it is dropped)."""
        ident = (namespace, key)
        with self._lock:
            item = self._items.get(ident)
            if item is None:
                return None
            if item.expires <= self._clock():
                self._drop(ident)
                return None
            self._items.move_to_end(ident)
            return item

    def put(self, entry: EntryInfo, content: bytes | None, stamp: ReadStamp) -> None:
        """Keep what a read that began at ``stamp`` found in the index (and its checked bytes, if it read
        them whole), until ``ttl`` seconds after ``stamp``.

        Nothing is kept if an entry was removed through this process since ``stamp`` (this one may be among
        them), or if the time is already up. A row without bytes does not replace an unexpired item of the
        same digest that has them.
        """
        if not self.enabled:
            return
        ident = (entry.namespace, entry.key)
        cost = _cost(entry, content)
        expires = stamp.at + self._ttl
        with self._lock:
            now = self._clock()
            if stamp.removals != self._removals or expires <= now:
                return
            old = self._items.get(ident)
            if old is not None:
                same = old.entry.sha256 == entry.sha256 and old.expires > now
                if content is None and old.content is not None and same:
                    return  # a row alone keeps the unexpired bytes of the same entry
                self._drop(ident)
            if cost > self._capacity:
                return
            self._items[ident] = HotEntry(entry, content, expires, cost)
            self._bytes += cost
            while self._items:  # expired items at the old end go first, then the least recently used
                first = next(iter(self._items))
                if self._items[first].expires > now and self._bytes <= self._capacity:
                    break
                self._drop(first)

    def forget(self, refs: Iterable[tuple[str, str]]) -> None:
        """Drop these (namespace, key) entries: they were removed. A read under way keeps nothing."""
        with self._lock:
            self._removals += 1
            for ident in refs:
                self._discard(ident)

    def stored(self, namespace: str, key: str) -> None:
        """A key was stored anew through this process: drop a copy of what it held before."""
        with self._lock:
            self._discard((namespace, key))

    def _discard(self, ident: tuple[str, str]) -> None:
        if ident in self._items:
            self._drop(ident)

    def _drop(self, ident: tuple[str, str]) -> None:
        self._bytes -= self._items.pop(ident).cost
