"""Admin routes for quotas: list them, set or remove a namespace's or a token's (admin role).

An upload past a quota is refused with 507 Insufficient Storage (``quota_exceeded``) before anything of it is
stored; see :mod:`cache_server.service.quotas`.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from cache_server.api.access import NO_TOKEN, declare
from cache_server.api.deps import QuotasDep, TokensDep
from cache_server.auth.tokens import Role
from cache_server.errors import TokenNotFound
from cache_server.service.quotas import NAMESPACE, TOKEN, QuotaRow

__all__ = ["QuotaIn", "QuotaOut", "QuotasOut", "router"]

router = APIRouter(prefix="/admin/quotas", tags=["admin"])

_MAX = 2**63 - 1  # what the index's BIGINT columns hold


class QuotaIn(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    max_entries: int | None = Field(
        default=None, ge=0, le=_MAX, description="At most this many entries (null: no entry limit)."
    )
    max_bytes: int | None = Field(
        default=None, ge=0, le=_MAX, description="At most this many bytes (null: no byte limit)."
    )


class QuotaOut(BaseModel):
    kind: str = Field(description="namespace or token.")
    subject: str = Field(description="The namespace's name, or the token's id.")
    max_entries: int | None
    max_bytes: int | None
    entries: int = Field(description="Entries its subject stores now.")
    bytes: int = Field(description="Bytes its subject stores now.")

    @classmethod
    def of(cls, row: QuotaRow) -> QuotaOut:
        return cls(**vars(row))


class QuotasOut(BaseModel):
    quotas: list[QuotaOut]


@router.get("", response_model=QuotasOut)
@declare(Role.ADMIN)
def list_quotas(quotas: QuotasDep) -> QuotasOut:
    """Every quota set, with what its namespace or token stores now."""
    return QuotasOut(quotas=[QuotaOut.of(row) for row in quotas.quotas()])


@router.put("/namespace/{namespace}", response_model=QuotaOut)
@declare(Role.ADMIN)
def set_namespace_quota(namespace: str, body: QuotaIn, quotas: QuotasDep) -> QuotaOut:
    """Set a namespace's quota (it may not exist yet); both limits null removes it. An upload that would
    take the namespace past it is refused with 507 before anything of it is stored."""
    row = quotas.set_quota(NAMESPACE, namespace, max_entries=body.max_entries, max_bytes=body.max_bytes)
    return QuotaOut.of(row)


@router.put("/token/{token}", response_model=QuotasOut)
@declare(Role.ADMIN, answers={"404": NO_TOKEN})
def set_token_quota(token: str, body: QuotaIn, quotas: QuotasDep, tokens: TokensDep) -> QuotasOut:
    """Set the quota of the tokens with this name or id (each its own: the entries it stored, in every
    namespace); both limits null removes it. 404 if no token has this name or id."""
    found = tokens.find(token)
    if not found:
        raise TokenNotFound(f"No token has the name or id {token!r}.")
    rows = [
        quotas.set_quota(TOKEN, info.id, max_entries=body.max_entries, max_bytes=body.max_bytes)
        for info in found
    ]
    return QuotasOut(quotas=[QuotaOut.of(row) for row in rows])
