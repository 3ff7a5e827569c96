"""Routes for "why is this namespace empty or thin": its nearest populated namespaces, and the dashboard's
namespace page (fingerprint, entries, nearest), which the dashboard's cookie may read."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field, field_validator

from cache_server.api.access import NO_NAMESPACE, Scope, declare
from cache_server.api.auth import principal
from cache_server.api.deps import NearestDep, ServiceDep
from cache_server.api.schemas import NamespaceOut, bounded_fingerprint, namespace_out
from cache_server.auth.tokens import Role
from cache_server.service.nearest import NearestAnswer

__all__ = ["DashboardNamespaceOut", "NearestIn", "NearestOut", "router"]

router = APIRouter(tags=["namespaces"])

MAX_NEAREST = 20
PAGE_ENTRIES = 50  # the namespace page lists the most useful entries, as a manifest orders them
_LIMIT = Query(ge=1, le=MAX_NEAREST, description="How many namespaces to name, nearest first.")


class DifferenceOut(BaseModel):
    field: str = Field(description="The fingerprint field, or for a flag its variable (XLA_FLAGS).")
    ours: Any = Field(description="This namespace's value (for a flag: --name=value); null: unset.")
    theirs: Any = Field(description="The other namespace's value; null: unset.")
    text: str = Field(description="Both values in one phrase: `<ours> (theirs: <theirs>)`.")


class NearNamespaceOut(BaseModel):
    namespace: str
    entries: int = Field(description="Entries it stores now.")
    last_used_at: dt.datetime
    differing_fields: int = Field(description="Fingerprint fields that differ (flags of one variable: one).")
    differences: list[DifferenceOut]


class NearestOut(BaseModel):
    namespace: str
    entries: int = Field(description="Entries this namespace stores now (0 when it was never registered).")
    nearest: list[NearNamespaceOut] = Field(description="Nearest first.")

    @classmethod
    def of(cls, answer: NearestAnswer) -> NearestOut:
        return cls(
            namespace=answer.namespace,
            entries=answer.entries,
            nearest=[
                NearNamespaceOut(
                    namespace=near.namespace,
                    entries=near.entries,
                    last_used_at=near.last_used_at,
                    differing_fields=near.differing_fields,
                    differences=[DifferenceOut(**d.as_dict()) for d in near.differences],
                )
                for near in answer.nearest
            ],
        )


class NearestIn(BaseModel):
    fingerprint: dict[str, Any] = Field(
        description="The runtime fingerprint to compare (bounded as a registration's), not the stored one."
    )

    @field_validator("fingerprint")
    @classmethod
    def _bounded(cls, value: dict[str, Any]) -> dict[str, Any]:
        return bounded_fingerprint(value)


class EntryRowOut(BaseModel):
    key: str
    size: int
    created_at: dt.datetime


class DashboardNamespaceOut(BaseModel):
    namespace: NamespaceOut
    entries: list[EntryRowOut] = Field(description=f"At most {PAGE_ENTRIES}, most useful first.")
    nearest: NearestOut


@router.get("/v1/namespaces/{namespace}/nearest", response_model=NearestOut)
@declare(Role.READ, Scope.PATH_NAMESPACE, answers={"404": NO_NAMESPACE})
def get_nearest(
    namespace: str, nearest: NearestDep, request: Request, limit: Annotated[int, _LIMIT] = 3
) -> NearestOut:
    """The populated namespaces of the same framework nearest to this one (by how many fingerprint fields
    differ, then entries, then recent use), each with the fields that differ and both values; a differing
    flags digest is resolved to the flags that differ. 404 when the namespace was never registered (POST
    the fingerprint instead). A token limited to namespace patterns learns only of namespaces it reaches."""
    return NearestOut.of(nearest.nearest(namespace, principal=principal(request), limit=limit))


@router.post("/v1/namespaces/{namespace}/nearest", response_model=NearestOut)
@declare(Role.READ, Scope.PATH_NAMESPACE)
def post_nearest(
    namespace: str,
    body: NearestIn,
    nearest: NearestDep,
    request: Request,
    limit: Annotated[int, _LIMIT] = 3,
) -> NearestOut:
    """As ``GET``, comparing the fingerprint sent (the namespace need not be registered: a read-only token's
    job cannot register it). Nothing is stored."""
    answer = nearest.nearest(namespace, body.fingerprint, principal=principal(request), limit=limit)
    return NearestOut.of(answer)


@router.get("/dashboard/namespaces/{namespace}", response_model=DashboardNamespaceOut)
@declare(Role.READ, Scope.PATH_NAMESPACE, answers={"404": NO_NAMESPACE})
def dashboard_namespace(
    namespace: str, service: ServiceDep, nearest: NearestDep, request: Request
) -> DashboardNamespaceOut:
    """What the dashboard's namespace page shows: the namespace and its fingerprint, its most useful
    entries, and its nearest populated namespaces with their differences."""
    info = service.get_namespace(namespace)
    rows = service.manifest(namespace, max_entries=PAGE_ENTRIES)
    answer = nearest.nearest(namespace, principal=principal(request), limit=5)
    return DashboardNamespaceOut(
        namespace=namespace_out(info),
        entries=[EntryRowOut(key=r.key, size=r.size, created_at=r.created_at) for r in rows],
        nearest=NearestOut.of(answer),
    )
