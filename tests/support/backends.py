"""A blob store under test (the ``backend`` fixture of tests/storage/conftest.py makes one per backend)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cache_server.storage.abilities import SignsUrls
from cache_server.storage.base import BlobStore

__all__ = ["Backend"]


@dataclass
class Backend:
    """A store under test, the optional abilities it has, what it physically keeps (blobs, temp files), a way
    to leave a foreign file."""

    kind: str
    store: BlobStore
    # Exactly the optional abilities (cache_server.storage.abilities.ABILITIES) the backend has: each is
    # checked.
    abilities: frozenset[type]
    stored_files: Callable[[], list[str]]
    plant: Callable[[str, bytes], None]  # a file or object that another program left under the store's root
    # For a store that keeps temp files: leave one as an upload that died that many seconds ago would.
    abandon_upload: Callable[[float], None] | None = None
    # Damage a stored blob's record as a bad disk or another tool would (local: one byte of its header; GCS:
    # its metadata garbled, the analogue: an object resource cannot be damaged otherwise).
    damage: Callable[[str], None] | None = None
    # For a store that signs URLs where its own credentials cannot (an emulator's are anonymous): the same
    # store opened with credentials that hold a key.
    signing: Callable[[], SignsUrls] | None = None
