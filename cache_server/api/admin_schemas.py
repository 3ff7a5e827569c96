"""Request and response bodies of the admin API (and of the dashboard's data)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from cache_server.admin.eviction import EvictionResult
from cache_server.admin.gc import DEFAULT_GRACE_SECONDS, GcResult
from cache_server.admin.packing import PackingResult
from cache_server.admin.provenance import PurgeResult, TokenUsage
from cache_server.admin.stats import StatsReport
from cache_server.api.schemas import INDEX_INT_MAX
from cache_server.domain import COUNTERS, Counters, NamespaceInfo, TokenInfo, counter_description
from cache_server.domain.runs import NO_RUNS, RunScopes, RunTotals

__all__ = [
    "CountersOut",
    "DayOut",
    "DeleteNamespaceOut",
    "EvictIn",
    "EvictOut",
    "EvictedEntryOut",
    "GcIn",
    "GcOut",
    "GraphOut",
    "NamespaceStatsOut",
    "PurgeIn",
    "PurgeOut",
    "PurgeSignerIn",
    "SignerUsageOut",
    "SignersOut",
    "StatsOut",
    "TokenOut",
    "TokenUsageOut",
    "TokensOut",
]


_MS, _SAVED = "_ms_saved", "_saved"
_HIT_RATE = (
    float | None,
    Field(description="The server's lookups: hits / (hits + misses); null before the first lookup."),
)
_JOBS_SCOPE = "What the runs of this scope (started in the period) reported: their hit rate and saved time."


def _counter_fields() -> dict[str, Any]:
    """One field per counter of :data:`~cache_server.domain.COUNTERS`; milliseconds are shown as seconds."""
    defined: dict[str, Any] = {}
    for name in COUNTERS:
        if name.endswith(_MS):
            seconds = name.removesuffix(_MS) + "_seconds" + _SAVED
            description = counter_description(name).replace("in milliseconds", "in seconds")
            defined[seconds] = (float, Field(description=description))
        else:
            defined[name] = (int, Field(description=counter_description(name)))
    return defined


def counter_values(counters: Counters) -> dict[str, Any]:
    """The counters' fields of a response body (see :func:`_counter_fields`), with the hit rate."""
    values: dict[str, Any] = {"hit_rate": counters.hit_rate}
    for name in COUNTERS:
        value = getattr(counters, name)
        if name.endswith(_MS):
            values[name.removesuffix(_MS) + "_seconds" + _SAVED] = value / 1000
        else:
            values[name] = value
    return values


class JobsOut(BaseModel):
    """What jobs reported of the same period (their run reports): what they loaded from the cache and what
    they compiled, and the compile time the loads saved (each hit: what its entry cost to compile). The hit
    rate and the saved time a team cares about, the only ones; the counters beside it (``hits``,
    ``misses``, ``compile_seconds_saved``) are the server's own lookups (a manifest or GET that found its
    key), which count downloads never used and miss the compiles of a job that did not ask."""

    runs: int = Field(description="Runs started in the period that reported.")
    hits: int = Field(description="Compiles the jobs' caches answered (entries loaded).")
    compiles: int = Field(description="Compiles the jobs paid (their misses).")
    hit_rate: float | None = Field(description="hits / (hits + compiles); null without reports.")
    compile_seconds: float = Field(description="Compile time the jobs paid.")
    saved_seconds: float = Field(
        description="Compile time the hits saved: what each entry the jobs loaded cost to compile."
    )

    @classmethod
    def of(cls, totals: RunTotals) -> JobsOut:
        looked = totals.hits + totals.misses
        return cls(
            runs=totals.runs,
            hits=totals.hits,
            compiles=totals.misses,
            hit_rate=totals.hits / looked if looked else None,
            compile_seconds=totals.compile_ms / 1000,
            saved_seconds=totals.saved_ms / 1000,
        )


# The counter fields come from the list of counters, so a new counter reaches every response by itself.
if TYPE_CHECKING:
    CountersOut = BaseModel
    NamespaceStatsOut = BaseModel
    DayOut = BaseModel
else:
    CountersOut = create_model(
        "CountersOut",
        entries=(int, Field(description="Entries stored now.")),
        bytes=(int, Field(description="Bytes stored now.")),
        hit_rate=_HIT_RATE,
        **_counter_fields(),
    )
    NamespaceStatsOut = create_model(
        "NamespaceStatsOut",
        __base__=CountersOut,
        namespace=(str, ...),
        framework=(
            str | None,
            Field(
                description="Whose cache it is (torch_xla, jax), as its fingerprint says; null if unknown."
            ),
        ),
        labels=(dict[str, str], ...),
        last_used_at=(dt.datetime, ...),
        jobs=(JobsOut, Field(default_factory=lambda: JobsOut.of(NO_RUNS), description=_JOBS_SCOPE)),
    )
    DayOut = create_model(
        "DayOut",
        day=(dt.date, ...),
        hit_rate=_HIT_RATE,
        jobs=(JobsOut, Field(default_factory=lambda: JobsOut.of(NO_RUNS), description=_JOBS_SCOPE)),
        **_counter_fields(),
    )


def namespace_stats_out(ns: NamespaceInfo, jobs: RunTotals = NO_RUNS) -> NamespaceStatsOut:
    return NamespaceStatsOut(
        jobs=JobsOut.of(jobs),
        namespace=ns.name,
        framework=ns.framework,
        labels=ns.labels,
        last_used_at=ns.last_used_at,
        entries=ns.entries,
        bytes=ns.bytes,
        **counter_values(ns.counters),
    )


class GraphOut(BaseModel):
    namespace: str
    module: str = Field(description="The HLO module name.")
    variants: int = Field(description="Distinct parameter/result shape signatures among its entries.")
    entries: int
    bytes: int
    hits: int
    source: str | None = Field(description="file:line it was traced at (jobs run with XLA_HLO_DEBUG=1).")
    examples: list[str] = Field(description="A few of its shape signatures.")
    compile_seconds: float = Field(
        default=0.0,
        description="Compile seconds paid for it: the compile times recorded with its entries, summed "
        "(the ranking's first key, then its entries: one compile each).",
    )


class StatsOut(BaseModel):
    generated_at: dt.datetime
    jobs: JobsOut | None = Field(
        default=None,
        description="What the jobs' run reports say for the same days (and namespace): the hit rate, "
        "compiles and saved time of the jobs themselves (each namespace row and each day has its own "
        "``jobs``). ``totals`` are the server's lookups.",
    )
    totals: CountersOut
    namespaces: list[NamespaceStatsOut]
    daily: list[DayOut] = Field(
        description="One row per UTC day, oldest first, days without traffic included."
    )
    top_graphs: list[GraphOut] = Field(
        description="The graphs that cost most to compile first (compile seconds paid, then compiles)."
    )
    stored_by: list[TokenUsageOut] = Field(
        default_factory=list, description="What each token stored (GET /admin/tokens), most bytes first."
    )
    namespace_count: int = Field(default=0, description="How many namespaces there are (all pages).")
    next_after: str | None = Field(
        default=None,
        description="Pass as after= for the next page of namespaces; null on the last page.",
    )

    @classmethod
    def of(
        cls, report: StatsReport, usage: list[TokenUsage] | None = None, jobs: RunScopes | None = None
    ) -> StatsOut:
        totals = report.totals
        by_namespace = jobs.by_namespace if jobs is not None else {}
        daily = jobs.daily if jobs is not None else {}
        return cls(
            jobs=JobsOut.of(jobs.total) if jobs is not None else None,
            namespace_count=report.namespace_count,
            next_after=report.next_after,
            generated_at=report.generated_at,
            totals=CountersOut(entries=totals.entries, bytes=totals.bytes, **counter_values(totals.counters)),
            namespaces=[
                namespace_stats_out(ns, by_namespace.get(ns.name, NO_RUNS)) for ns in report.namespaces
            ],
            daily=[
                DayOut(day=d.day, jobs=JobsOut.of(daily.get(d.day, NO_RUNS)), **counter_values(d.counters))
                for d in report.daily
            ],
            top_graphs=[GraphOut(**vars(g)) for g in report.top_graphs],
            stored_by=TokensOut.of(usage or []).tokens,
        )


MAX_BYTES = INDEX_INT_MAX  # what the index's BIGINT columns hold
MAX_SECONDS = 100 * 366 * 24 * 3600  # a century: any longer period is a mistake, and overflows dates


class EvictIn(BaseModel):
    model_config = ConfigDict(strict=True)  # a JSON true is not the number 1, nor "5" the number 5

    max_total_bytes: int | None = Field(
        default=None,
        ge=0,
        le=MAX_BYTES,
        description="Evict least recently used entries until at most this many bytes remain.",
    )
    older_than_seconds: float | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Evict entries not used for this long.",
    )
    namespace: str | None = Field(default=None, description="Only this namespace (budgets then apply to it).")
    dry_run: bool = Field(default=False, description="List what would go; remove nothing.")
    list_limit: int = Field(default=1000, ge=0, le=100_000, description="At most this many keys listed.")


class EvictedEntryOut(BaseModel):
    namespace: str
    key: str
    size: int
    last_access_at: dt.datetime


class EvictOut(BaseModel):
    evicted: int = Field(description="Entries removed (or that would be, on a dry run).")
    freed_bytes: int
    dry_run: bool
    keys: list[EvictedEntryOut] | None = Field(
        default=None, description="On a dry run: what would go, least recently used first."
    )
    keys_truncated: bool = Field(default=False, description="More would go than list_limit lets us list.")
    remaining: int | None = Field(
        default=None,
        description="A purge of a signer or a token: how many entries it signed or stored are left (call "
        "again until 0); null for an eviction.",
    )

    @classmethod
    def of(cls, result: EvictionResult) -> EvictOut:
        keys = [EvictedEntryOut(**vars(ref)) for ref in result.entries] if result.dry_run else None
        return cls(
            evicted=result.evicted,
            freed_bytes=result.freed_bytes,
            dry_run=result.dry_run,
            keys=keys,
            keys_truncated=result.dry_run and not result.listed_all,
            remaining=result.remaining,
        )


class GcIn(BaseModel):
    model_config = ConfigDict(strict=True)  # a JSON true is not the number 1, nor "5" the number 5

    grace_seconds: float = Field(
        default=DEFAULT_GRACE_SECONDS,
        ge=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Blobs younger than this are never orphans (their row may be on its way).",
    )
    dry_run: bool = Field(default=False, description="Count what would be removed; remove nothing.")


class GcOut(BaseModel):
    blobs_checked: int
    rows_checked: int
    orphan_blobs_removed: int
    orphan_bytes_removed: int
    rows_dropped: int = Field(description="Index rows whose blob was gone.")
    temp_files_removed: int
    packs_checked: int
    packs_removed: int = Field(description="Packs no row pointed into any more.")
    pack_bytes_removed: int
    dry_run: bool
    damaged_blobs: int = Field(
        description="Blobs whose header or metadata could not be read: set aside (their rows dropped)."
    )

    @classmethod
    def of(cls, result: GcResult) -> GcOut:
        return cls(**vars(result))


class PackIn(BaseModel):
    model_config = ConfigDict(strict=True)

    max_entries: int = Field(
        default=100_000,
        ge=1,
        le=10_000_000,
        description="Loose entries (stored without a copy in a pack) to look at, at most, in this call.",
    )
    max_seconds: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="Stop after the page of entries in progress once this long has gone by.",
    )


class PackOut(BaseModel):
    entries_checked: int = Field(description="Loose small entries looked at.")
    entries_packed: int = Field(description="Entries whose rows now point into a new pack.")
    packs_written: int
    pack_bytes_written: int
    unreadable: int = Field(description="Entries left loose: their blob was gone, damaged or unreadable.")
    done: bool = Field(
        description="The pass reached the last loose entry (false: call again to go on where it stopped)."
    )

    @classmethod
    def of(cls, result: PackingResult) -> PackOut:
        return cls(**vars(result))


class DeleteNamespaceOut(BaseModel):
    namespace: str
    deleted_entries: int
    freed_bytes: int
    remaining: int = Field(
        default=0, description="Entries left (with max_entries): call again until 0; the namespace goes then."
    )


class TokenOut(BaseModel):
    """A token as an admin sees it: never its secret."""

    id: str
    name: str
    role: str
    namespaces: list[str] | None = Field(description="The namespace patterns it is limited to; null: any.")
    created_at: dt.datetime
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None
    metrics_off: bool = Field(
        default=False,
        description="Its run reports are stored but add nothing to the xla_cache_run_* metrics "
        "(PUT /admin/tokens/{token}/metrics).",
    )

    @classmethod
    def of(cls, info: TokenInfo) -> TokenOut:
        values = vars(info) | {"namespaces": list(info.namespaces) if info.namespaces is not None else None}
        return cls(**values)


class TokenMetricsIn(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    counted: bool = Field(
        description="true: the token's run reports count in the xla_cache_run_* metrics (the default); "
        "false: they are stored and shown, and add nothing to the metrics."
    )


class TokenMetricsOut(BaseModel):
    tokens: list[TokenOut] = Field(description="The active tokens with this name or id, as they are now.")


class TokenUsageOut(BaseModel):
    token_id: str | None = Field(description="The id of the token that stored them; null: auth was off.")
    token: TokenOut | None = Field(description="That token; null when the index does not know it.")
    entries: int = Field(description="Entries it stored that are in the cache now.")
    bytes: int


class TokensOut(BaseModel):
    tokens: list[TokenUsageOut] = Field(description="Every token, most bytes stored first.")

    @classmethod
    def of(cls, usage: list[TokenUsage]) -> TokensOut:
        return cls(
            tokens=[
                TokenUsageOut(
                    token_id=u.token_id,
                    token=TokenOut.of(u.token) if u.token is not None else None,
                    entries=u.entries,
                    bytes=u.bytes,
                )
                for u in usage
            ]
        )


def _max_entries(remaining: str) -> Any:
    """A purge's ``max_entries``: its bounds, and the answer's field that says how many are left."""
    return Field(
        default=None,
        ge=1,
        le=INDEX_INT_MAX,
        description="Remove at most this many in this call (the least recently used); the answer's "
        f"{remaining} says how many are left. Absent: all of them.",
    )


class PurgeIn(BaseModel):
    model_config = ConfigDict(strict=True)  # a JSON true is not the number 1, nor "5" the number 5

    revoke: bool = Field(default=True, description="Revoke the token first, so it stores nothing more.")
    dry_run: bool = Field(default=False, description="List what would go; revoke and remove nothing.")
    list_limit: int = Field(default=1000, ge=0, le=100_000, description="At most this many keys listed.")
    max_entries: int | None = _max_entries("removed.remaining")


class PurgeOut(BaseModel):
    tokens: list[TokenOut] = Field(description="The tokens with this name or id.")
    revoked: list[str] = Field(description="The ids of those this call revoked.")
    removed: EvictOut = Field(description="The entries they stored, removed (or that would be).")

    @classmethod
    def of(cls, result: PurgeResult) -> PurgeOut:
        return cls(
            tokens=[TokenOut.of(info) for info in result.tokens],
            revoked=[info.id for info in result.revoked],
            removed=EvictOut.of(result.removed),
        )


class SignerUsageOut(BaseModel):
    signer: str | None = Field(
        description="The key id (cache_protocol.signing); null: entries no key known to the server signed."
    )
    entries: int
    bytes: int


class SignersOut(BaseModel):
    signers: list[SignerUsageOut] = Field(description="Entries per signer, most bytes first.")


class PurgeSignerIn(BaseModel):
    model_config = ConfigDict(strict=True)

    dry_run: bool = Field(default=False, description="List what would go; remove nothing.")
    list_limit: int = Field(default=1000, ge=0, le=100_000, description="At most this many keys listed.")
    max_entries: int | None = _max_entries("remaining")
