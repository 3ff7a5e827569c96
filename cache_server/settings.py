"""The one settings class. Every knob of the server lives here, read from ``XLA_CACHE_*`` variables.

Nothing reads the environment anywhere else: :func:`cache_server.app.create_app` takes a :class:`Settings`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cache_protocol.tar import BLOCK, MAX_HEADER_BYTES

__all__ = ["DEFAULT_DATA_DIR", "SECTIONS", "Settings"]

DEFAULT_DATA_DIR = Path("xla-cache-data")
MIB = 1024**2
GIB = 1024**3


class Settings(BaseSettings):
    """Server settings; each field is read from ``XLA_CACHE_<FIELD>`` (case-insensitive)."""

    model_config = SettingsConfigDict(env_prefix="XLA_CACHE_", extra="ignore")

    # -- Where the data lives --------------------------------------------------------------------------------
    data_dir: Path = Field(
        default=DEFAULT_DATA_DIR,
        description="Where the embedded defaults keep their files (SQLite index, local blobs).",
    )
    database_url: str = Field(
        default="",
        description="SQLAlchemy URL of the index. Empty: SQLite at <data_dir>/index.sqlite3.",
    )
    storage_url: str = Field(
        default="",
        description="Blob store: file:///path, or gs://bucket/prefix. Empty: <data_dir>/blobs.",
    )
    db_pool_size: int = Field(default=10, gt=0, description="SQL connection pool size (PostgreSQL).")
    db_max_overflow: int = Field(default=20, ge=0, description="Connections allowed beyond the pool size.")
    db_pool_timeout: float = Field(default=10.0, gt=0, description="Seconds to wait for a pooled connection.")
    db_connect_timeout: float = Field(default=5.0, gt=0, description="Seconds to wait when connecting.")
    db_statement_timeout: float = Field(
        default=30.0, gt=0, description="Seconds one database call may take before it is abandoned (503)."
    )
    db_pool_pre_ping: bool = Field(default=True, description="Test each pooled connection before use.")
    slots_dir: str = Field(
        default="",
        description=(
            "Where the processes of one server share their slots for heavy work (lock files; a local file "
            "system that every worker sees). Empty: <data_dir>/slots."
        ),
    )
    storage_timeout: float = Field(default=30.0, gt=0, description="Seconds for one storage call.")
    storage_retries: int = Field(default=5, ge=0, description="Retries of a storage call on 429/5xx.")

    # -- Serving ---------------------------------------------------------------------------------------------
    workers: int = Field(
        default=1,
        gt=0,
        description=(
            "Worker processes of `serve` (its --workers). The manifest tells clients to open at most this "
            "many bundle streams at once: more streams than processes only make them take turns."
        ),
    )
    log_level: str = Field(default="info", description="Logging level.")
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Seconds a connection may take to send a request's headers (from its opening, or from "
        "the first byte of a later request on a kept-alive connection): then it is closed. Slow or idle "
        "connections cannot pile up.",
    )
    max_connections: int = Field(
        default=2048,
        gt=0,
        le=1_000_000,
        description="Connections (or requests in progress) per worker process; a request beyond it is "
        "answered 503 and its connection closed (uvicorn's limit_concurrency).",
    )
    keep_alive_seconds: int = Field(
        default=5, ge=1, le=3600, description="Seconds an idle keep-alive connection stays open."
    )
    max_json_bytes: int = Field(
        default=4 * MIB,  # 1.5 times the largest legitimate body; parsing a body costs many times its size
        gt=0,
        description="Largest request body of every route but an entry upload (JSON), in bytes (413 over it).",
    )

    # -- Uploads ---------------------------------------------------------------------------------------------
    max_entry_bytes: int = Field(default=4 * GIB, gt=0, description="Largest entry accepted, in bytes.")
    max_concurrent_uploads: int = Field(
        default=16,
        gt=0,
        description="Entry uploads handled at once, each on a worker thread of their own (not the routes').",
    )
    upload_wait_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How long an upload waits for a free upload slot before 503 (with Retry-After).",
    )
    body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Longest pause while a request body arrives before the request ends with 408.",
    )
    min_upload_bytes_per_second: int = Field(
        default=16 * 1024,
        ge=0,
        le=2**40,
        description=(
            "After the body timeout's first seconds, an entry upload must average at least this rate "
            "since it began, or it ends with 408 (0: no minimum)."
        ),
    )
    max_bulk_bytes: int = Field(
        default=2 * GIB,  # 28 times the largest push the client sends (64 MiB of entries, one of 8 MiB)
        gt=0,
        description=(
            "Longest bulk upload (POST .../entries): its tar stream, and its body as sent, in bytes; it ends "
            "with 413 there (at once for a member whose declared size alone passes it)."
        ),
    )
    max_bulk_header_bytes: int = Field(
        default=MAX_HEADER_BYTES,
        ge=BLOCK,
        description=(
            "Most header bytes (PAX headers, global ones included) between two members of a bulk upload; "
            "more ends it with 413."
        ),
    )
    max_bulk_seconds: float = Field(
        default=1800.0,
        gt=0,
        description=(
            "Longest a bulk upload's body may take to arrive; it ends with 408 there (the client sends "
            "at most 72 MiB in one)."
        ),
    )
    orphan_grace_seconds: float = Field(
        default=300.0,
        ge=0,
        description=(
            "A blob with no index row older than this is an orphan: an upload of its key with other bytes "
            "replaces it, and background gc removes it (younger: an upload may still be writing its row, "
            "so such an upload answers 503). Keep it above the longest gap between a blob and its row: a "
            "database call (XLA_CACHE_DB_POOL_TIMEOUT + XLA_CACHE_DB_STATEMENT_TIMEOUT) and the arrival of "
            "one bulk member (a bulk upload commits each group once it has been open a quarter of this)."
        ),
    )

    # -- Reads -----------------------------------------------------------------------------------------------
    max_keys_per_request: int = Field(default=10_000, gt=0, description="Keys allowed in one missing/bundle.")
    bundle_compression: bool = Field(
        default=True,
        description="Compress bundles with zstd for clients that accept it (Accept-Encoding: zstd).",
    )
    hot_cache_bytes: int = Field(
        default=64 * MIB,
        ge=0,
        description=(
            "Memory each server process keeps for entries it read a moment ago (their rows, and the bytes of "
            "those of at most 1 MiB), answered again without an index lookup or a store read (0: off)."
        ),
    )
    hot_cache_seconds: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description=(
            "How long such a memory copy is used after its index read: the longest another process's or "
            "replica's delete of the entry goes unseen here (0: off)."
        ),
    )
    signed_url_seconds: int = Field(
        default=0,
        ge=0,
        le=7 * 24 * 3600,  # the longest a V4 signed URL may live
        description="GCS: hand out signed URLs valid this long, so hosts download from the bucket (0: off).",
    )
    packs: bool | None = Field(
        default=None,
        description=(
            "Also keep the small entries of each bulk upload as one pack object, which bundles read by byte "
            "range (a few requests instead of one per entry). Unset: on for gs:// stores, off for local ones."
        ),
    )
    pack_interval_seconds: float = Field(
        default=60.0,
        gt=0,
        description=(
            "Where packs are written: how often the server gives the small entries stored without a copy in "
            "a pack (single PUTs, small bulk uploads) one, a page of 4,096 entries per round."
        ),
    )

    # -- Budgets and background work -------------------------------------------------------------------------
    max_total_bytes: int | None = Field(
        default=None, gt=0, description="Background eviction keeps the whole store under this many bytes."
    )
    max_namespace_bytes: int | None = Field(
        default=None, gt=0, description="Background eviction keeps each namespace under this many bytes."
    )
    eviction_interval_seconds: float = Field(default=60.0, gt=0, description="Background eviction period.")
    access_flush_seconds: float = Field(
        default=2.0, gt=0, description="How often batched hit/miss counters and access times are written."
    )
    gc_interval_seconds: float = Field(
        default=3600.0,
        ge=0,
        description=(
            "How often each server process runs gc in the background (orphan blobs older than "
            "XLA_CACHE_ORPHAN_GRACE_SECONDS, rows whose blob is gone, damaged blobs set aside; 0: only "
            "when an admin asks, POST /admin/gc)."
        ),
    )
    parser_memory_mb: int = Field(
        default=512,
        ge=64,
        description=(
            "Memory cap of each server process's graph parser child (its data, MiB): an entry that needs "
            "more is recorded as unparseable ('the parser ran out of its memory cap'), never parsed again."
        ),
    )

    # -- Tokens and trust ------------------------------------------------------------------------------------
    auth: bool = Field(default=False, description="Require bearer tokens.")
    max_namespaces_per_token: int = Field(
        default=1000,
        ge=0,
        description=(
            "How many namespaces one token may create (register, or store the first entry of); more are "
            "refused with 507 (0: no limit; auth off: not counted)."
        ),
    )
    signer_keys: str = Field(
        default="",
        description=(
            "Public keys of the uploaders whose entry signatures this server checks: keys "
            "(ed25519:<base64>) or paths of key files, comma separated (xla-cache keys create makes them)."
        ),
    )
    require_signatures: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            'Namespaces that require signed uploads, as JSON {"<namespace pattern>": ["<key id>", ...]}: '
            "an upload into a matching namespace (the first pattern that matches) must be signed by one of "
            "those keys (* : any key of XLA_CACHE_SIGNER_KEYS), or it is refused with 403."
        ),
    )

    # -- Stats, metrics and diagnosis ------------------------------------------------------------------------
    stats_page_namespaces: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description=(
            "Namespaces in one page of /admin/stats and /dashboard/data when the request gives no limit."
        ),
    )
    nearest_candidates: int = Field(
        default=200,
        ge=1,
        le=100_000,
        description=(
            "How many populated namespaces of a framework (the most recently used) GET "
            "/v1/namespaces/{ns}/nearest compares with the namespace's fingerprint: the bound on its work."
        ),
    )
    metrics_label_refresh_seconds: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="At most one read of the registered namespaces per this many seconds, to label metrics.",
    )
    graph_reports_at_once: int = Field(
        default=2,
        ge=1,
        le=64,
        description=(
            "Bucketing reports (GET /admin/graphs, the dashboard's graph view) built at once by the whole "
            "server, all its worker processes together; each may take a second or two of CPU."
        ),
    )
    graph_report_wait_seconds: float = Field(
        default=2.0,
        ge=0,
        le=60,
        description="How long a report waits for one of those slots before 503 (with Retry-After).",
    )
    run_details_at_once: int = Field(
        default=2,
        ge=1,
        le=64,
        description=(
            "Run details (GET /admin/runs/{id}, the dashboard's run page) explained at once by the whole "
            "server, all its worker processes together; each page may take up to a second or two of CPU."
        ),
    )
    run_detail_wait_seconds: float = Field(
        default=10.0,
        ge=0,
        le=60,
        description="How long a run detail waits for one of those slots before 503 (with Retry-After).",
    )

    # -- History ---------------------------------------------------------------------------------------------
    run_retention_days: float = Field(
        default=30.0,
        gt=0,
        description="Run reports (POST /v1/runs) older than this many days are pruned by background gc.",
    )
    max_runs: int = Field(
        default=100_000,
        ge=1,
        description="At most this many run reports are kept; background gc prunes the oldest beyond it.",
    )
    max_runs_per_token: int = Field(
        default=10_000,
        ge=0,
        description=(
            "How many runs one token's reports may keep; a report of a new run past it is refused with 507 "
            "and stores nothing (0: no limit; auth off: not counted)."
        ),
    )
    max_run_misses_per_token: int = Field(
        default=50_000,
        ge=0,
        description=(
            "How many reported misses (compiles) the runs of one token may keep; a report's misses past it "
            "are counted in its run's numbers, not stored (0: no limit; auth off: not counted)."
        ),
    )
    max_run_misses_per_namespace: int = Field(
        default=100_000,
        ge=0,
        description=(
            "How many reported misses the runs of one namespace may keep; a report's misses past it are "
            "counted in its run's numbers, not stored (0: no limit)."
        ),
    )
    tombstone_days: float = Field(
        default=30.0,
        gt=0,
        description=(
            "A removed entry's tombstone (when and by which policy it went, to explain a later compile of "
            "its key) is kept this many days; background gc prunes older ones."
        ),
    )
    max_tombstones: int = Field(
        default=1_000_000,
        ge=1,
        description="At most this many tombstones are kept; background gc prunes the oldest beyond it.",
    )

    @field_validator("log_level")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()

    @property
    def resolved_database_url(self) -> str:
        """The database URL, with the embedded SQLite default filled in."""
        url = self.database_url
        # The driver we ship is psycopg 3; accept the plain scheme people copy from their cloud console.
        for plain in ("postgresql://", "postgres://"):
            if url.startswith(plain):
                return "postgresql+psycopg://" + url[len(plain) :]
        if url:
            return url
        return f"sqlite:///{(self.data_dir / 'index.sqlite3').resolve()}"

    @property
    def resolved_storage_url(self) -> str:
        """The storage URL, with the embedded local-directory default filled in."""
        if self.storage_url:
            return self.storage_url
        return (self.data_dir / "blobs").resolve().as_uri()

    @property
    def slots_directory(self) -> Path:
        """Where the server's slots live (:class:`~cache_server.background.slots.ServerSlots`): ``slots_dir``,
        or ``<data_dir>/slots``."""
        return (Path(self.slots_dir) if self.slots_dir else self.data_dir / "slots").resolve()

    @property
    def uses_embedded_sqlite(self) -> bool:
        """True when the index is a SQLite file (``serve`` then migrates it itself)."""
        return self.resolved_database_url.startswith("sqlite")


# The settings by concern, in the class's order: the settings reference (docs/reference/settings.md) has one
# table per section, and a test checks that every field is in exactly one.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Where the data lives",
        (
            "data_dir",
            "database_url",
            "storage_url",
            "db_pool_size",
            "db_max_overflow",
            "db_pool_timeout",
            "db_connect_timeout",
            "db_statement_timeout",
            "db_pool_pre_ping",
            "slots_dir",
            "storage_timeout",
            "storage_retries",
        ),
    ),
    (
        "Serving",
        (
            "workers",
            "log_level",
            "header_timeout_seconds",
            "max_connections",
            "keep_alive_seconds",
            "max_json_bytes",
        ),
    ),
    (
        "Uploads",
        (
            "max_entry_bytes",
            "max_concurrent_uploads",
            "upload_wait_seconds",
            "body_timeout_seconds",
            "min_upload_bytes_per_second",
            "max_bulk_bytes",
            "max_bulk_header_bytes",
            "max_bulk_seconds",
            "orphan_grace_seconds",
        ),
    ),
    (
        "Reads",
        (
            "max_keys_per_request",
            "bundle_compression",
            "hot_cache_bytes",
            "hot_cache_seconds",
            "signed_url_seconds",
            "packs",
            "pack_interval_seconds",
        ),
    ),
    (
        "Budgets and background work",
        (
            "max_total_bytes",
            "max_namespace_bytes",
            "eviction_interval_seconds",
            "access_flush_seconds",
            "gc_interval_seconds",
            "parser_memory_mb",
        ),
    ),
    (
        "Tokens and trust",
        (
            "auth",
            "max_namespaces_per_token",
            "signer_keys",
            "require_signatures",
        ),
    ),
    (
        "Stats, metrics and diagnosis",
        (
            "stats_page_namespaces",
            "nearest_candidates",
            "metrics_label_refresh_seconds",
            "graph_reports_at_once",
            "graph_report_wait_seconds",
            "run_details_at_once",
            "run_detail_wait_seconds",
        ),
    ),
    (
        "History",
        (
            "run_retention_days",
            "max_runs",
            "max_runs_per_token",
            "max_run_misses_per_token",
            "max_run_misses_per_namespace",
            "tombstone_days",
            "max_tombstones",
        ),
    ),
)
