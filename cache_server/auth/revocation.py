"""Revoke and purge inside uploads in flight: an upload asks whether its token is still active around each
commit, and takes back what it wrote once it is not.

A request is authorized once, when it starts; a bulk upload or a large ``PUT`` may go on for minutes after
that. So the route, which knows the token, hands the upload a :data:`StillAllowed` question (none with auth
off), and the one entry writer (:mod:`cache_server.service.writer`, for a single ``PUT`` and each group of a
bulk upload alike) asks it through these two functions: :func:`check_still_allowed` before a group of blobs is
committed, so that a revoked token stores nothing more, and :func:`undo_if_revoked` right after the rows are
written, before anyone hears of them. One read of the token's row each time: two per group of a bulk upload,
not one per member.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cache_server.domain import utcnow
from cache_server.errors import TokenRevoked
from cache_server.index.entries import EntryRecord, EntryRepository
from cache_server.storage.base import BlobStore, blob_name

__all__ = ["StillAllowed", "check_still_allowed", "undo_if_revoked"]

StillAllowed = Callable[[], bool]
"""Whether the token an upload was sent with is still active (one read of its row)."""


def _revoked() -> TokenRevoked:
    return TokenRevoked(
        "The token this upload was sent with was revoked while the upload was in flight: it stopped there, "
        "and nothing it sent after the revoke is stored (a purge of the token removes what it stored before)."
    )


def check_still_allowed(still_allowed: StillAllowed | None) -> None:
    """:class:`TokenRevoked` if the upload's token has been revoked (nothing to check with auth off)."""
    if still_allowed is not None and not still_allowed():
        raise _revoked()


def undo_if_revoked(
    still_allowed: StillAllowed | None,
    created: Sequence[EntryRecord],
    *,
    entries: EntryRepository,
    store: BlobStore,
) -> None:
    """Called right after the rows of ``created`` (the entries this upload just stored) were written, before
    they are announced: if the token has been revoked meanwhile, remove them (rows first, then blobs, as the
    consistency rules say) and raise :class:`TokenRevoked`.

    Why this closes the race with a purge: ``purge-token`` revokes the token first and only then removes
    every entry it stored. If this check still sees the token active, the revoke had not been committed when
    it read, so these rows were committed before the revoke, and the purge's removal (after the revoke)
    finds and removes them. If it sees the token revoked, the purge may already have looked, so the upload
    removes its own rows here. Either way nothing the token stored outlives its purge.
    """
    if still_allowed is None or still_allowed():
        return
    for record in created:
        entries.delete_entry(
            record.namespace, record.key, policy="purge", when=utcnow(), sha256=record.sha256
        )
    for record in created:
        store.delete(blob_name(record.namespace, record.key))
    raise _revoked()
