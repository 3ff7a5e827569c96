"""A blob store under test (the ``backend`` fixture of tests/storage/conftest.py makes one per backend)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cache_server.storage.base import BlobStore

__all__ = ["Backend"]


@dataclass
class Backend:
    """A store under test, what it physically keeps (blobs, temp files), a way to leave a foreign file."""

    kind: str
    store: BlobStore
    stored_files: Callable[[], list[str]]
    plant: Callable[[str, bytes], None]  # a file or object that another program left under the store's root
    # For a store that keeps temp files: leave one as an upload that died that many seconds ago would.
    abandon_upload: Callable[[float], None] | None = None
