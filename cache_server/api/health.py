"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter

from cache_server.api.access import declare
from cache_server.api.deps import ServiceDep

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz")
@declare(None)
async def healthz() -> dict[str, str]:
    """The process is up. Answered on the event loop itself, not in a worker thread: while request threads
    hold the GIL (run details being explained), each hand-off between threads waits for it, and a liveness
    probe that hands off twice per request answered in up to a second."""
    return {"status": "ok"}


@router.get("/readyz")
@declare(None)
def readyz(service: ServiceDep) -> dict[str, str]:
    """The index and the blob store are reachable (503 with the reason otherwise)."""
    service.check_ready()
    return {"status": "ready"}
