"""Provenance: which token stored what, and the answer to a leaked token (revoke it, remove what it stored).

Every entry uploaded with auth on records the id of the token that sent it (``entries.stored_by``, also in
the blob's metadata so that reindex keeps it). An entry uploaded with auth off has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cache_server.admin.eviction import EvictionResult, Evictor
from cache_server.auth.tokens import TokenManager
from cache_server.domain import TokenInfo
from cache_server.errors import TokenNotFound
from cache_server.index.admin import AdminRepository

__all__ = ["PurgeResult", "TokenUsage", "purge_token", "token_usage"]


@dataclass(frozen=True)
class TokenUsage:
    """What one token stored and still is in the cache. ``token`` is None for entries stored with auth off
    (``token_id`` None too) or by a token id the index does not know (a database restored from a backup)."""

    token_id: str | None
    token: TokenInfo | None
    entries: int
    bytes: int


@dataclass
class PurgeResult:
    """The tokens a purge matched, which of them it revoked now, and the entries it removed (or would)."""

    tokens: list[TokenInfo]
    revoked: list[TokenInfo] = field(default_factory=list)
    removed: EvictionResult = field(default_factory=EvictionResult)


def token_usage(tokens: TokenManager, repository: AdminRepository) -> list[TokenUsage]:
    """Every token (revoked ones too) with the entries and bytes it stored, most bytes first; then the
    entries no known token stored."""
    stored = repository.stored_by_token()
    usage = [TokenUsage(info.id, info, *stored.pop(info.id, (0, 0))) for info in tokens.list_tokens()]
    usage += [TokenUsage(token_id, None, *held) for token_id, held in stored.items()]
    return sorted(usage, key=lambda u: (-u.bytes, u.token is None, u.token_id or ""))


def purge_token(
    tokens: TokenManager,
    evictor: Evictor,
    name_or_id: str,
    *,
    revoke: bool = True,
    dry_run: bool = False,
    list_limit: int = 1000,
    max_entries: int | None = None,
) -> PurgeResult:
    """Revoke the tokens with this name or id (unless ``revoke`` is false), then remove every entry they
    stored (at most ``max_entries`` in this call; ``removed.remaining``: how many are left). Revoking comes
    first, so a leaked token cannot store more while its entries go; a later call finds it revoked already.

    :class:`TokenNotFound` if no token has this name or id.
    """
    found = tokens.find(name_or_id)
    if not found:
        raise TokenNotFound(f"No token is named {name_or_id!r} or has that id.")
    result = PurgeResult(tokens=found)
    if revoke and not dry_run:
        result.revoked = tokens.revoke(name_or_id)
    result.removed = evictor.remove_stored_by(
        [info.id for info in found], dry_run=dry_run, list_limit=list_limit, max_entries=max_entries
    )
    return result
