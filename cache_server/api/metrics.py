"""``GET /metrics``: Prometheus text format, open like the health checks."""

from __future__ import annotations

from fastapi import APIRouter, Response

from cache_server.api.access import declare
from cache_server.api.deps import AdminDep, SettingsDep
from cache_server.auth.tokens import Role
from cache_server.metrics import CONTENT_TYPE, StorageBudgetCollector, StoredCollector, render

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response)
@declare(Role.READ)
def prometheus_metrics(admin: AdminDep, settings: SettingsDep) -> Response:
    """Requests by route and status with latency histograms, hits, misses, bytes in and out, evictions,
    run reports by framework (summed over all workers), entries and bytes stored (read from the index
    now), and the storage budget."""
    body = render(
        StoredCollector(admin.stored_by_namespace), StorageBudgetCollector(settings.max_total_bytes)
    )
    return Response(content=body, headers={"Content-Type": CONTENT_TYPE})
