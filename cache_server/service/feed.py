"""The change feed: its reading side (:class:`Feed`), and its waiting side: long polls that hold no worker
thread, woken across replicas.

Every upload that stores an entry appends a row to the index's ``entry_feed`` (the same transaction as the
entry's row), numbered by the database. A follower asks for its namespace's rows after a cursor; when
there are none yet, its request waits here, on the event loop, without a thread. One :class:`FeedWatcher`
per server process polls the index every :data:`POLL_SECONDS` (one small query, and only while someone is
waiting) for the namespaces whose feed grew, whichever replica stored the entries, and wakes their waiters,
which then read their rows. Polling the shared database, rather than PostgreSQL notifications, works the
same on SQLite and PostgreSQL, across any number of replicas, with nothing to listen on.

Two transactions may commit in the other order than their numbers; a follower's read therefore starts
:data:`LOOKBACK` positions before its cursor, and the follower drops what it already has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import anyio
import anyio.to_thread

from cache_server.index.feed import FeedEntry, FeedRepository
from cache_server.names import check_namespace

__all__ = ["LOOKBACK", "POLL_SECONDS", "Feed", "FeedWatcher"]

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
LOOKBACK = 64
QUERY_THREADS = 4  # the feed's reads run on threads of their own, apart from the other routes'


class Feed:
    """The feed's rows, read through the index's :class:`FeedRepository` (the writer appends them with the
    entries)."""

    def __init__(self, rows: FeedRepository) -> None:
        self._rows = rows

    def head(self) -> int:
        """The feed's newest position: where a new follower starts."""
        return self._rows.feed_head()

    def heads(self, after: int) -> dict[str, int]:
        """The namespaces whose feed grew after ``after``, with their newest position."""
        return self._rows.feed_heads(after)

    def rows(self, namespace: str, after: int, limit: int) -> list[FeedEntry]:
        """The namespace's entries stored after position ``after``, oldest first."""
        return self._rows.feed(check_namespace(namespace), after, limit)


class FeedWatcher:
    """Wakes the long polls of namespaces whose feed grew. Build and run it on the app's event loop."""

    def __init__(self, heads: Callable[[int], dict[str, int]], head: Callable[[], int]) -> None:
        self._heads = heads
        self._head = head
        self._events: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}
        self._last = -1
        self._task: asyncio.Task[None] | None = None
        self.threads = anyio.CapacityLimiter(QUERY_THREADS)

    @property
    def waiting(self) -> int:
        """How many long polls are waiting now."""
        return sum(self._waiting.values())

    async def wait(self, namespace: str, seconds: float) -> None:
        """Return when ``namespace``'s feed may have grown, or after ``seconds``."""
        if seconds <= 0:
            return
        self._ensure_running()
        event = self._events.setdefault(namespace, asyncio.Event())
        self._waiting[namespace] = self._waiting.get(namespace, 0) + 1
        try:
            with anyio.move_on_after(seconds):
                await event.wait()
        finally:
            self._waiting[namespace] -= 1
            if not self._waiting[namespace]:
                del self._waiting[namespace]
                if not event.is_set() and self._events.get(namespace) is event:
                    del self._events[namespace]

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._poll(), name="xla-cache-feed-watcher")

    async def _poll(self) -> None:
        """Poll while anyone waits; a namespace that grew gets a fresh event once its waiters are woken."""
        failed_since: float | None = None
        while self._waiting:
            try:
                if self._last < 0:
                    self._last = await anyio.to_thread.run_sync(self._head, limiter=self.threads)
                grown = await anyio.to_thread.run_sync(self._heads, self._last, limiter=self.threads)
                failed_since = None
            except Exception as exc:  # an index outage: the long polls end by their own deadline
                if failed_since is None:
                    failed_since = time.monotonic()
                    log.warning("the change feed cannot read the index (%s); retrying", type(exc).__name__)
                grown = {}
            for namespace, seq in grown.items():
                self._last = max(self._last, seq)
                event = self._events.pop(namespace, None)
                if event is not None:
                    event.set()
            await asyncio.sleep(POLL_SECONDS)
        self._last = -1  # nobody waits: the next waiter starts from the head again

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with anyio.CancelScope(shield=True), contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
