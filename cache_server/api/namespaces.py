"""Routes for namespaces."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from cache_server.api.access import NO_NAMESPACE, QUOTA, Scope, declare
from cache_server.api.auth import principal
from cache_server.api.deps import ServiceDep
from cache_server.api.schemas import NamespaceIn, NamespaceOut, namespace_out
from cache_server.auth.tokens import Role

__all__ = ["router"]

router = APIRouter(prefix="/v1/namespaces", tags=["namespaces"])


@router.put("/{namespace}", response_model=NamespaceOut)
@declare(Role.WRITE, Scope.PATH_NAMESPACE, answers={"201": "Registered: the namespace is new", "507": QUOTA})
def put_namespace(
    namespace: str, body: NamespaceIn, service: ServiceDep, request: Request, response: Response
) -> NamespaceOut:
    """Register a namespace with its runtime fingerprint and labels, or update them. 201 when new; 507
    when new and the token has created ``XLA_CACHE_MAX_NAMESPACES_PER_TOKEN`` namespaces already."""
    who = principal(request)
    info, created = service.register_namespace(
        namespace, body.fingerprint, body.labels, created_by=who.token_id if who is not None else None
    )
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return namespace_out(info)


@router.get("/{namespace}", response_model=NamespaceOut)
@declare(Role.READ, Scope.PATH_NAMESPACE, answers={"404": NO_NAMESPACE})
def get_namespace(namespace: str, service: ServiceDep) -> NamespaceOut:
    """A namespace, its fingerprint, its entry count and bytes, and its counters."""
    return namespace_out(service.get_namespace(namespace))
