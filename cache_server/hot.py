"""Entries this process read a moment ago, kept in memory so that the next reads skip the index and the store.

A single GET costs most of its time in getting there: a hop to a worker thread (the event loop must not
wait on the database or the disk), the index lookup, and the read of the blob. When many jobs of a fleet
ask for the same new executable within a second, or one job asks for an entry again, those costs repeat
for the same answer. :class:`HotEntries` keeps what a read found (the index row, and the bytes of an entry
of at most :data:`~cache_server.service.WHOLE_READ_BYTES`, already checked against its digest) for
``ttl`` seconds from the moment the index was read, within a budget of ``capacity`` bytes, least recently
used first out. A lookup takes no I/O and no lock wait worth the name, so the route answers from it on the
event loop itself.

What a memory copy can be behind by: an entry removed through *this* process (a delete, an eviction, a
namespace removed, a damaged blob dropped) is forgotten at once; one removed through another worker
process or another replica is served from here for at most ``ttl`` seconds more (the verified bytes it had
when it was read). Keys are create-only, so no entry changes under a copy. A blob damaged on disk after
its read is found by the first read after the copy expires. ``capacity`` 0 turns it off.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cache_server.domain import EntryInfo

__all__ = ["HotEntries", "HotEntry"]

ITEM_OVERHEAD = 400
"""Bytes counted for each item besides its content: the row, the dictionary slot, the key strings."""


@dataclass(frozen=True)
class HotEntry:
    """An entry's index row, and its bytes (checked) when they were read whole; ``None`` for a larger one."""

    entry: EntryInfo
    content: bytes | None
    expires: float


class HotEntries:
    """A byte-bounded, time-bounded LRU of recently read entries. Thread-safe."""

    def __init__(self, capacity: int, ttl: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = capacity
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, str], HotEntry] = OrderedDict()
        self._bytes = 0

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

    def put(self, entry: EntryInfo, content: bytes | None = None) -> None:
        """Keep what a read just found in the index (and its checked bytes, if it read them whole).

        A row without bytes does not replace an unexpired item of the same digest that has them.
        """
        if not self.enabled:
            return
        cost = ITEM_OVERHEAD + (len(content) if content is not None else 0)
        if cost > self._capacity:
            return
        ident = (entry.namespace, entry.key)
        now = self._clock()
        with self._lock:
            old = self._items.get(ident)
            if (
                content is None
                and old is not None
                and old.content is not None
                and old.entry.sha256 == entry.sha256
                and old.expires > now
            ):
                return
            if old is not None:
                self._drop(ident)
            self._items[ident] = HotEntry(entry, content, now + self._ttl)
            self._bytes += cost
            while self._bytes > self._capacity:
                self._drop(next(iter(self._items)))

    def forget(self, refs: Iterable[tuple[str, str]]) -> None:
        """Drop these (namespace, key) entries: they were removed."""
        with self._lock:
            for ident in refs:
                if ident in self._items:
                    self._drop(ident)

    def _drop(self, ident: tuple[str, str]) -> None:
        item = self._items.pop(ident)
        self._bytes -= ITEM_OVERHEAD + (len(item.content) if item.content is not None else 0)
