"""The index: every SQL query of the server. One :class:`Database` shared by one repository per table group:
:class:`EntryRepository` (namespaces, entries, access counts), :class:`AdminRepository` (stats, eviction,
gc), :class:`GraphRepository` (what parsing each entry found) and :class:`TokenRepository` (bearer tokens).
Nothing outside this package opens a session; no repository inherits another's queries.
"""

from __future__ import annotations

from cache_server.index.admin import AdminRepository
from cache_server.index.database import Database
from cache_server.index.entries import EntryRepository
from cache_server.index.graph_records import GraphRepository
from cache_server.index.tokens import TokenRepository

__all__ = ["AdminRepository", "Database", "EntryRepository", "GraphRepository", "TokenRepository"]
