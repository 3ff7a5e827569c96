"""The cache service, one module per concept (see :mod:`cache_server.service.facade` for the map):
namespaces, the one entry writer and the bulk upload, single reads and their verification, bundles, signed
URLs. No HTTP here; :mod:`cache_server.api` maps its results and errors to responses.
"""

from cache_server.service.bulk import BulkResult, MemberOutcome
from cache_server.service.facade import CacheService
from cache_server.service.reads import EntryRead, NotModified, OpenedEntry, ReadWish
from cache_server.service.signed_urls import SignedEntry, SignedUrls
from cache_server.service.verify import CorruptBlob
from cache_server.service.writer import PutResult, StoredHook

__all__ = [
    "BulkResult",
    "CacheService",
    "CorruptBlob",
    "EntryRead",
    "MemberOutcome",
    "NotModified",
    "OpenedEntry",
    "PutResult",
    "ReadWish",
    "SignedEntry",
    "SignedUrls",
    "StoredHook",
]
