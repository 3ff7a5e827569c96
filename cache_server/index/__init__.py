"""The index: every SQL query of the server. One :class:`Database` shared by one repository per table group:
:class:`EntryRepository` (namespaces, entries, access counts), :class:`AdminRepository` (stats, graphs,
eviction, gc) and :class:`TokenRepository` (bearer tokens). Nothing outside this package opens a session.
"""

from __future__ import annotations

from cache_server.index.admin import AdminRepository
from cache_server.index.database import Database
from cache_server.index.entries import EntryRepository
from cache_server.index.tokens import TokenRepository

__all__ = ["AdminRepository", "Database", "EntryRepository", "TokenRepository"]
