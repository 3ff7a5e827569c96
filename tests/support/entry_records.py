"""Index rows for the index tests: an entry of a given size (and token), its digest a placeholder."""

from __future__ import annotations

from cache_server.domain import utcnow
from cache_server.index.entries import EntryRecord

__all__ = ["record"]


def record(
    namespace: str, key: str, size: int, token: str | None = None, compile_ms: int | None = None
) -> EntryRecord:
    """A row of ``size`` bytes stored now (by ``token``, compiled in ``compile_ms``), with a placeholder
    digest."""
    return EntryRecord(
        namespace, key, size, "0" * 64, created_at=utcnow(), stored_by=token, compile_time_ms=compile_ms
    )
