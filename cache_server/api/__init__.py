"""HTTP layer: routes per resource, dependencies, and the one error mapping."""

from __future__ import annotations

from fastapi import APIRouter

from cache_server.api import (
    admin,
    dashboard,
    docs,
    entries,
    feed,
    graphs,
    health,
    metrics,
    namespaces,
    nearest,
    pages,
    quotas,
    runs,
    signed_urls,
    uploads,
)

__all__ = ["router"]

router = APIRouter()
# The hot routes first: a request is matched against the routes in this order.
router.include_router(entries.router)
router.include_router(uploads.router)
router.include_router(feed.router)
router.include_router(namespaces.router)
router.include_router(nearest.router)
router.include_router(signed_urls.router)
router.include_router(health.router)
router.include_router(metrics.router)
router.include_router(docs.router)
router.include_router(admin.router)
router.include_router(graphs.router)
router.include_router(quotas.router)
router.include_router(runs.router)
router.include_router(dashboard.router)
router.include_router(pages.router)
