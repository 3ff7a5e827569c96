"""The admin side: stats, eviction, garbage collection and entry parsing. Domain code, no HTTP."""

from __future__ import annotations

from cache_server.admin.service import AdminService

__all__ = ["AdminService"]
