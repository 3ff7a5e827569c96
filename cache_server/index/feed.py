"""The change feed: its newest position, the namespaces with news after a position, and a namespace's
entries stored after one (:class:`FeedRepository`; the rows are written with the entries, by
:mod:`.entries`)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from cache_server.index.database import Database
from cache_server.index.models import Entry, EntryFeed

__all__ = ["FeedEntry", "FeedRepository"]


@dataclass(frozen=True)
class FeedEntry:
    """An entry as the change feed gives it: its position and what a follower needs to fetch it."""

    seq: int
    key: str
    size: int
    sha256: str
    compile_time_ms: int | None
    signature: str | None = None


class FeedRepository:
    """Queries of the ``entry_feed`` table, over the shared :class:`Database`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def feed_head(self) -> int:
        """The newest position of the change feed (0 when it is empty)."""
        with self._db.transaction() as session:
            return int(session.scalar(select(func.max(EntryFeed.seq))) or 0)

    def feed_heads(self, after: int) -> dict[str, int]:
        """The namespaces with feed rows after ``after``, and their newest position."""
        stmt = select(EntryFeed.namespace, func.max(EntryFeed.seq)).where(EntryFeed.seq > after)
        with self._db.transaction() as session:
            return {ns: int(seq) for ns, seq in session.execute(stmt.group_by(EntryFeed.namespace))}

    def feed(self, namespace: str, after: int, limit: int) -> list[FeedEntry]:
        """The namespace's entries stored after position ``after``, oldest first, at most ``limit``."""
        stmt = (
            select(EntryFeed.seq, Entry.key, Entry.size, Entry.sha256, Entry.compile_time_ms, Entry.signature)
            .join(Entry, (Entry.namespace == EntryFeed.namespace) & (Entry.key == EntryFeed.key))
            .where(EntryFeed.namespace == namespace, EntryFeed.seq > after)
            .order_by(EntryFeed.seq)
            .limit(limit)
        )
        with self._db.transaction() as session:
            return [
                FeedEntry(int(seq), key, int(size), sha, ms, signature)
                for seq, key, size, sha, ms, signature in session.execute(stmt)
            ]
