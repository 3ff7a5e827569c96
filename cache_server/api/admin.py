"""Admin routes: stats, eviction, garbage collection, packing, namespace removal, token provenance. All
need the admin role."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from cache_protocol.signing import KEY_ID_PATTERN
from cache_server.admin.stats import StatsQuery
from cache_server.api.access import NO_TOKEN, declare
from cache_server.api.admin_schemas import (
    DeleteNamespaceOut,
    EvictIn,
    EvictOut,
    GcIn,
    GcOut,
    PackIn,
    PackOut,
    PurgeIn,
    PurgeOut,
    PurgeSignerIn,
    SignersOut,
    SignerUsageOut,
    StatsOut,
    TokenMetricsIn,
    TokenMetricsOut,
    TokenOut,
    TokensOut,
)
from cache_server.api.deps import AdminDep, EvictorDep, RunsDep, SettingsDep, TokensDep
from cache_server.api.schemas import INDEX_INT_MAX
from cache_server.auth.tokens import Role
from cache_server.errors import InvalidName, PacksOff, TokenNotFound

__all__ = ["router"]

router = APIRouter(prefix="/admin", tags=["admin"])

PAGE_LIMIT = "Namespaces in this page (default XLA_CACHE_STATS_PAGE_NAMESPACES)."
PAGE_AFTER = "The next_after of the page before (absent: the first page)."


@router.get("/stats", response_model=StatsOut)
@declare(Role.ADMIN)
def stats(
    admin: AdminDep,
    runs: RunsDep,
    settings: SettingsDep,
    days: Annotated[int, Query(ge=1, le=3660, description="Days of daily rollup, today included.")] = 30,
    top: Annotated[int, Query(ge=0, le=1000, description="How many graphs to list.")] = 10,
    namespace: Annotated[str | None, Query(description="Only this namespace.")] = None,
    limit: Annotated[int | None, Query(ge=1, le=10_000, description=PAGE_LIMIT)] = None,
    after: Annotated[str | None, Query(max_length=200, description=PAGE_AFTER)] = None,
) -> StatsOut:
    """Totals and per namespace (entries, bytes, hits, misses, hit rate, uploads, evictions, bytes served,
    compile time saved), a daily rollup, the graphs that cost most to compile, and what each token
    stored (every namespace's, also with ``namespace``); ``jobs``: what the jobs' run reports of the same
    days say (their hit rate and compiles; the totals' hits and misses are the server's lookups).
    Namespaces come a page at a time, largest first: ``limit`` of them (default
    ``XLA_CACHE_STATS_PAGE_NAMESPACES``) after the cursor ``after`` (the ``next_after`` of the page
    before, null on the last page); totals and ``namespace_count`` cover all."""
    limit = limit or settings.stats_page_namespaces
    report = admin.stats(StatsQuery(days=days, top=top, namespace=namespace, limit=limit, after=after))
    names = [ns.name for ns in report.namespaces]
    jobs = runs.scopes(days=days, namespace=namespace, namespaces=names)
    return StatsOut.of(report, admin.token_usage(), jobs)


@router.post("/evict", response_model=EvictOut)
@declare(Role.ADMIN)
def evict(body: EvictIn, evictor: EvictorDep) -> EvictOut:
    """Evict least recently used entries: those unused for ``older_than_seconds``, then more until at most
    ``max_total_bytes`` remain (in ``namespace`` if given). With neither, the configured budgets apply.
    ``dry_run`` lists what would go. Index rows go before blobs."""
    result = evictor.evict(
        max_total_bytes=body.max_total_bytes,
        older_than_seconds=body.older_than_seconds,
        namespace=body.namespace,
        dry_run=body.dry_run,
        list_limit=body.list_limit,
    )
    return EvictOut.of(result)


@router.post("/gc", response_model=GcOut)
@declare(Role.ADMIN)
def gc(admin: AdminDep, body: GcIn | None = None) -> GcOut:
    """Reconcile storage and index: blobs without a row (older than ``grace_seconds``) are removed, rows
    whose blob is gone are dropped; the counts are returned."""
    body = body or GcIn()
    return GcOut.of(admin.gc(grace_seconds=body.grace_seconds, dry_run=body.dry_run))


@router.post("/pack", response_model=PackOut, responses={501: {"description": "This server writes no packs"}})
@declare(Role.ADMIN)
def pack(admin: AdminDep, body: PackIn | None = None) -> PackOut:
    """Give the small entries stored without a copy in a pack (single PUTs, bulk uploads too small to pack,
    reindexed ones) copies in new packs now, so that bundles from a remote store read them a pack at a
    time; the server also does this in the background. 501 where it writes no packs."""
    body = body or PackIn()
    result = admin.pack_loose(body.max_entries, body.max_seconds)
    if result is None:
        raise PacksOff(
            "This server writes no packs: its store keeps none, or XLA_CACHE_PACKS is false (a local "
            "directory packs only with XLA_CACHE_PACKS=true)."
        )
    return PackOut.of(result)


MAX_ENTRIES = "Remove at most this many entries in this call; remaining says how many are left (absent: all)."


@router.delete("/namespaces/{namespace}", response_model=DeleteNamespaceOut)
@declare(Role.ADMIN, answers={"404": "No such namespace"})
def delete_namespace(
    namespace: str,
    admin: AdminDep,
    max_entries: Annotated[int | None, Query(ge=1, le=INDEX_INT_MAX, description=MAX_ENTRIES)] = None,
) -> DeleteNamespaceOut:
    """Remove a namespace and every entry in it (rows first, then blobs, a few thousand a transaction); 404
    if it does not exist. With ``max_entries``, at most that many entries go in this call and the namespace
    itself once none remain: call again until ``remaining`` is 0 (a call cut short by a server that died
    loses nothing: the next removes the rest)."""
    result = admin.delete_namespace(namespace, max_entries=max_entries)
    return DeleteNamespaceOut(
        namespace=namespace,
        deleted_entries=result.evicted,
        freed_bytes=result.freed_bytes,
        remaining=result.remaining or 0,
    )


@router.get("/tokens", response_model=TokensOut)
@declare(Role.ADMIN)
def tokens(admin: AdminDep) -> TokensOut:
    """Every token (revoked ones too, never their secrets) with the entries and bytes it stored that are in
    the cache now; then what was stored with auth off."""
    return TokensOut.of(admin.token_usage())


@router.post("/tokens/{token}/purge", response_model=PurgeOut)
@declare(Role.ADMIN, answers={"404": NO_TOKEN})
def purge_token(token: str, admin: AdminDep, body: PurgeIn | None = None) -> PurgeOut:
    """The answer to a leaked token: revoke the tokens with this name or id, then remove every entry they
    stored (rows first, then blobs). ``dry_run`` lists what would go. ``max_entries``: at most that many in
    this call, ``removed.remaining`` the ones left (the CLI calls again until 0; a call cut short by a server
    that died loses nothing). 404 if no token has this name or id."""
    body = body or PurgeIn()
    result = admin.purge_token(
        token,
        revoke=body.revoke,
        dry_run=body.dry_run,
        list_limit=body.list_limit,
        max_entries=body.max_entries,
    )
    return PurgeOut.of(result)


@router.put("/tokens/{token}/metrics", response_model=TokenMetricsOut)
@declare(Role.ADMIN, answers={"404": "No active token has this name or id"})
def token_metrics(token: str, body: TokenMetricsIn, tokens: TokensDep) -> TokenMetricsOut:
    """Count the run reports of the active tokens with this name or id in the ``xla_cache_run_*`` metrics,
    or not (``counted``: false, for a token whose jobs would distort the fleet's figures: a test rig, a
    misbehaving uploader). Their runs are stored and shown either way. 404 if no active token matches."""
    changed = tokens.set_metrics(token, on=body.counted)
    if not changed:
        raise TokenNotFound(f"No active token is named {token[:64]!r} or has that id.")
    return TokenMetricsOut(tokens=[TokenOut.of(info) for info in changed])


UNSIGNED = "unsigned"


@router.get("/signers", response_model=SignersOut)
@declare(Role.ADMIN)
def signers(admin: AdminDep) -> SignersOut:
    """Entries and bytes per signer key id, most bytes first; ``signer`` null counts the unsigned entries."""
    usage = admin.signer_usage()
    return SignersOut(signers=[SignerUsageOut(signer=s, entries=n, bytes=b) for s, (n, b) in usage.items()])


@router.post("/signers/{signer}/purge", response_model=EvictOut)
@declare(Role.ADMIN)
def purge_signer(signer: str, evictor: EvictorDep, body: PurgeSignerIn | None = None) -> EvictOut:
    """The answer to a leaked signing key: remove every entry it signed (rows first, then blobs), as a purge
    of a token does; ``unsigned`` in place of a key id removes every unsigned entry. ``dry_run`` lists what
    would go. ``max_entries``: at most that many in this call, ``remaining`` the ones left (the CLI calls
    again until 0; a call cut short by a server that died loses nothing: the next removes the rest). 400 for
    anything but a key id (16 lowercase hex digits) or ``unsigned``."""
    if signer != UNSIGNED and not KEY_ID_PATTERN.fullmatch(signer):
        raise InvalidName(f"{signer[:40]!r} is not a key id (16 lowercase hex digits) nor {UNSIGNED!r}.")
    body = body or PurgeSignerIn()
    key_id = None if signer == UNSIGNED else signer
    result = evictor.remove_signed_by(
        key_id, dry_run=body.dry_run, list_limit=body.list_limit, max_entries=body.max_entries
    )
    return EvictOut.of(result)
