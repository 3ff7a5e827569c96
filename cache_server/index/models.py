"""SQLAlchemy models of the index. Alembic migrations in ``migrations/`` create exactly these tables."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    false,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.elements import KeyedColumnElement

from cache_protocol.prefill import PREFILL_UPLOADER
from cache_protocol.runs import RUN_NUMBERS
from cache_protocol.signing import SIGNATURE_MAX_LENGTH
from cache_server.domain import utcnow

__all__ = [
    "NO_TOKEN",
    "PREFILLED",
    "ApiToken",
    "Base",
    "DailyStats",
    "Entry",
    "EntryFeed",
    "EntryGraph",
    "EntryTotals",
    "GraphCount",
    "Namespace",
    "Quota",
    "Run",
    "RunMiss",
    "Tombstone",
    "UtcDateTime",
    "run_number",
]

NO_TOKEN = ""
"""``entry_totals.stored_by`` of the entries stored without a token (``entries.stored_by`` NULL)."""

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UtcDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC timestamp on every database (SQLite drops the zone; this puts it back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(dt.timezone.utc)

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc)

    def result_processor(
        self, dialect: Dialect, coltype: object
    ) -> Callable[[Any], dt.datetime | None] | None:
        """On SQLite, one function from the stored text to the aware time: the layered default (the
        dialect's parser, then :meth:`process_result_value`) was most of the time of reading a manifest's
        rows. Text :func:`datetime.fromisoformat` refuses goes the layered way (whose own parser then
        decides: on Python 3.10 it may know more formats)."""
        layered = super().result_processor(dialect, coltype)
        if dialect.name != "sqlite" or layered is None:
            return layered
        parse, utc = dt.datetime.fromisoformat, dt.timezone.utc

        def process(value: Any) -> dt.datetime | None:
            if isinstance(value, str):
                try:
                    parsed = parse(value)
                except ValueError:
                    return layered(value)
                return parsed.replace(tzinfo=utc) if parsed.tzinfo is None else parsed.astimezone(utc)
            return layered(value)

        return process


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Namespace(Base):
    """A compatibility namespace: the entries that fit one runtime fingerprint, and its counters.

    The counter columns are :data:`cache_server.domain.COUNTERS` (a test pins them equal).
    """

    __tablename__ = "namespaces"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    fingerprint: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_used_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    hits: Mapped[int] = mapped_column(BigInteger, default=0)
    misses: Mapped[int] = mapped_column(BigInteger, default=0)
    uploads: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_served: Mapped[int] = mapped_column(BigInteger, default=0)
    evictions: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    bytes_uploaded: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    compile_ms_saved: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    live_deliveries: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    live_compile_ms_saved: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    # the id of the token that created it (registered it, or stored its first entry); None: auth off or
    # before migration 0009. Counted against XLA_CACHE_MAX_NAMESPACES_PER_TOKEN.
    created_by: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)


class Entry(Base):
    """One cached executable: a key in a namespace, its blob's size and digest, and its use."""

    __tablename__ = "entries"
    __table_args__ = (
        Index("ix_entries_last_access_at", "last_access_at"),
        Index("ix_entries_stored_by", "stored_by"),
        Index("ix_entries_signer", "signer"),
    )

    namespace: Mapped[str] = mapped_column(
        String(128), ForeignKey("namespaces.name", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(256), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_access_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    hits: Mapped[int] = mapped_column(BigInteger, default=0)
    compile_time_ms: Mapped[int | None] = mapped_column(Integer, nullable=True)
    uploader: Mapped[str | None] = mapped_column(String(256), nullable=True)  # as the client declared it
    stored_by: Mapped[str | None] = mapped_column(String(32), nullable=True)  # the token's id (auth on)
    # Where a copy of the bytes lies in a pack (see cache_server.service.packs), if one does: its id and
    # offset.
    pack: Mapped[str | None] = mapped_column(String(32), nullable=True)
    pack_offset: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # The uploader's Ed25519 signature (cache_protocol.signing: "<key id>:<base64>") and its key id.
    signer: Mapped[str | None] = mapped_column(String(16), nullable=True)
    signature: Mapped[str | None] = mapped_column(String(SIGNATURE_MAX_LENGTH), nullable=True)


# The manifest's order, whole: a manifest reads its first rows off this index and stops, instead of sorting
# the namespace (entries of equal hits, all of them on a new cache, would otherwise be sorted together).
Index(
    "ix_entries_manifest_order",
    Entry.namespace,
    Entry.hits.desc(),
    Entry.last_access_at.desc(),
    Entry.key,
)

# The entries a prefill stored, by namespace (migration 0023: their uploader says so,
# cache_protocol.prefill): the graphs report counts a namespace's off this index alone, not over all of
# its rows (500,000 rows of one namespace: 80 ms on PostgreSQL). Queries name the same condition, its pattern
# inline (PREFILLED), so both databases see that they may use it.
PREFILLED = f"uploader LIKE '{PREFILL_UPLOADER} %'"
Index(
    "ix_entries_prefilled",
    Entry.namespace,
    Entry.uploader,
    sqlite_where=text(PREFILLED),
    postgresql_where=text(PREFILLED),
)

# The rows pointing into each pack (gc, a pack found damaged), and the rows pointing into none, in key order
# (packing later, cache_server.admin.packing, reads pages of them here instead of sorting every loose row
# each round): two partial indexes, each row in one.
Index(
    "ix_entries_pack",
    Entry.pack,
    sqlite_where=Entry.pack.is_not(None),
    postgresql_where=Entry.pack.is_not(None),
)
Index(
    "ix_entries_loose",
    Entry.namespace,
    Entry.key,
    sqlite_where=Entry.pack.is_(None),
    postgresql_where=Entry.pack.is_(None),
)


class EntryTotals(Base):
    """What is stored now, per namespace and per token that stored it: entries and their bytes.

    Kept by triggers on ``entries`` (migration 0006), in the transaction of every insert, delete and change of
    size or token, whoever writes the row (uploads, reindex, eviction, delete, purge, gc), with atomic
    ``SET entries = entries + d`` statements: PostgreSQL sums each statement's rows once (statement triggers
    over its transition tables), SQLite counts each row. So stats, the gauges and the budgets read a few rows
    here instead of counting ``entries``. ``stored_by`` is :data:`NO_TOKEN` for entries stored with auth off.
    Rows may stay at zero; a namespace's go with it. No foreign key: the triggers' update of a row whose
    namespace is being deleted must not matter.

    A later migration that rebuilds ``entries`` on SQLite (``batch_alter_table``) drops the triggers with the
    table and must create them again (``tests/index/test_totals.py`` would fail).
    """

    __tablename__ = "entry_totals"
    # a token's usage (its quota's check) sums its rows: one per namespace it stored into (migration 0009)
    __table_args__ = (Index("ix_entry_totals_stored_by", "stored_by"),)

    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    stored_by: Mapped[str] = mapped_column(String(32), primary_key=True)
    entries: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)


class DailyStats(Base):
    """One namespace's counters (:data:`cache_server.domain.COUNTERS`) for one UTC day: the rollup the
    dashboard charts.

    No foreign key: the history of a namespace outlives the namespace.
    """

    __tablename__ = "daily_stats"

    day: Mapped[dt.date] = mapped_column(Date, primary_key=True)
    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    hits: Mapped[int] = mapped_column(BigInteger, default=0)
    misses: Mapped[int] = mapped_column(BigInteger, default=0)
    uploads: Mapped[int] = mapped_column(BigInteger, default=0)
    evictions: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_served: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_uploaded: Mapped[int] = mapped_column(BigInteger, default=0)
    compile_ms_saved: Mapped[int] = mapped_column(BigInteger, default=0)
    live_deliveries: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    live_compile_ms_saved: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))


class EntryGraph(Base):
    """What parsing an entry found: its HLO module name and a digest of its parameter and result shapes.

    ``module`` is None when the entry could not be parsed (``unparseable`` says why, migration 0017); the
    row still says "tried", so nobody parses it again. Goes away with its entry."""

    __tablename__ = "entry_graphs"
    __table_args__ = (
        ForeignKeyConstraint(["namespace", "key"], ["entries.namespace", "entries.key"], ondelete="CASCADE"),
        Index("ix_entry_graphs_module_signature", "namespace", "module", "signature"),
    )

    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    key: Mapped[str] = mapped_column(String(256), primary_key=True)
    module: Mapped[str | None] = mapped_column(String(256), nullable=True)
    signature: Mapped[str | None] = mapped_column(String(64), nullable=True)
    shapes: Mapped[str | None] = mapped_column(Text, nullable=True)
    source: Mapped[str | None] = mapped_column(String(512), nullable=True)
    parsed_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    # what the graph computes beyond its shapes (migration 0014; cache_server.parsing.instructions)
    structure: Mapped[str | None] = mapped_column(String(32), nullable=True)
    program: Mapped[str | None] = mapped_column(String(32), nullable=True)
    whole: Mapped[str | None] = mapped_column(String(32), nullable=True)
    ops: Mapped[str | None] = mapped_column(Text, nullable=True)
    unparseable: Mapped[str | None] = mapped_column(String(256), nullable=True)


# A graph's rows with a body, the latest parsed last (migration 0022): the bucketing report reads a module's
# latest bodies and counts them off this index, whatever the module holds (it joined all of a module's
# entries to ``entries`` and sorted them by upload time: 55 ms for a module of 16,000 entries on PostgreSQL).
Index(
    "ix_entry_graphs_bodies",
    EntryGraph.namespace,
    EntryGraph.module,
    EntryGraph.parsed_at,
    EntryGraph.key,
    sqlite_where=EntryGraph.ops.is_not(None),
    postgresql_where=EntryGraph.ops.is_not(None),
)


class GraphCount(Base):
    """One graph (HLO module) of a namespace: how many distinct shape signatures (``variants``) and how many
    ``entry_graphs`` rows (``entries``) it has now.

    Kept by triggers on ``entry_graphs`` (migration 0013) as ``entry_totals`` is by triggers on ``entries``:
    in the transaction of every statement that inserts, deletes or changes a graph's row (parsing, reindex,
    the foreign key's cascade from every deletion of an entry), so ``GET /admin/graphs`` ranks a namespace's
    graphs off ``ix_graph_counts_ranking`` instead of counting its rows, and by cost off
    ``ix_graph_counts_cost`` (``compile_ms``: migration 0021 adds it, and triggers on ``entries`` that
    keep it as entries go or their compile time changes) instead of summing its entries' compile times.
    Rows may stay at zero (the ranking skips them); a namespace's go with it. No foreign key, as for
    ``entry_totals``.

    A later migration that rebuilds ``entry_graphs`` on SQLite (``batch_alter_table``) drops the triggers
    with the table and must create them again (``tests/index/test_graph_counts.py`` would fail).
    """

    __tablename__ = "graph_counts"

    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    module: Mapped[str] = mapped_column(String(256), primary_key=True)
    variants: Mapped[int] = mapped_column(BigInteger)
    entries: Mapped[int] = mapped_column(BigInteger)
    # the compile ms recorded with its entries (``entries.compile_time_ms``), summed (migration 0021)
    compile_ms: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


# A namespace's graphs in the bucketing report's order, read off the index: most variants, then most
# entries, then by name.
Index(
    "ix_graph_counts_ranking",
    GraphCount.namespace,
    GraphCount.variants.desc(),
    GraphCount.entries.desc(),
    GraphCount.module,
)
# ... and in the cost ranking's: most compile ms, then most entries, then by name (migration 0021).
Index(
    "ix_graph_counts_cost",
    GraphCount.namespace,
    GraphCount.compile_ms.desc(),
    GraphCount.entries.desc(),
    GraphCount.module,
)


class EntryFeed(Base):
    """The change feed: one row per entry an upload stored, in the order the index numbered them; followers
    read it after a cursor (``seq``). Goes away with its entry (found by key: migration 0016)."""

    __tablename__ = "entry_feed"
    __table_args__ = (
        ForeignKeyConstraint(["namespace", "key"], ["entries.namespace", "entries.key"], ondelete="CASCADE"),
        Index("ix_entry_feed_namespace_seq", "namespace", "seq"),
        Index("ix_entry_feed_namespace_key", "namespace", "key"),  # the cascade from an entry (0016)
    )

    seq: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    namespace: Mapped[str] = mapped_column(String(128))
    key: Mapped[str] = mapped_column(String(256))


class ApiToken(Base):
    """A bearer token. Only the SHA-256 of the token is kept; ``id`` is its public, non-secret part."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), index=True)
    role: Mapped[str] = mapped_column(String(16))
    namespaces: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)  # patterns; None: every one
    token_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime, nullable=True)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime, nullable=True)
    # migration 0015: its run reports are stored but add nothing to the xla_cache_run_* counters
    metrics_off: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class Quota(Base):
    """A limit on what a namespace, or the entries one token stored, may hold (migration 0009).

    ``kind`` is ``namespace`` (``subject`` its name) or ``token`` (``subject`` the token's id); each limit is
    None when unset. Compared with the ``entry_totals`` the triggers keep, before an upload stores anything
    (:mod:`cache_server.service.quotas`). No foreign key: a quota may be set before its namespace exists, and
    stays when it is deleted.
    """

    __tablename__ = "quotas"

    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    subject: Mapped[str] = mapped_column(String(128), primary_key=True)
    max_entries: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    updated_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)


class Run(Base):
    """One job's run report (migration 0010): a process (or a host, where processes share a namespace)
    that warmed, what it found, what it compiled and what that cost. The client sends its cumulative
    numbers at exit and every few minutes while it runs; each report replaces the numbers of the last.

    ``run_id`` is made by the client; ``reported_by`` is the id of the token that first reported it (None
    with auth off): a later report of the same id from another token is refused. No foreign key to
    ``namespaces``: a run's story outlives its namespace's deletion, and is pruned by age and count only.
    Its numbers' columns are made from their declaration below; durations are whole milliseconds.
    """

    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_namespace_started_at", "namespace", "started_at"),
        Index("ix_runs_started_at", "started_at"),
        Index("ix_runs_updated_at", "updated_at"),
        Index("ix_runs_reported_by", "reported_by"),  # migration 0015: a token's runs, for its budget
    )

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(128))
    framework: Mapped[str] = mapped_column(String(32))
    host: Mapped[str] = mapped_column(String(256))
    process_index: Mapped[int] = mapped_column(Integer, default=0)
    reported_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    started_at: Mapped[dt.datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    ended_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime, nullable=True)  # None: still running
    # The components of JAX's cache key the run saw (migration 0020; issue 44): its latest report's.
    runtime: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


# The run's numbers (cache_protocol.runs.RUN_NUMBERS: warm_ms, hits, misses, compile_ms, saved_ms...): one
# BigInteger column each, 0 by default; a number added after migration 0010 has 0 as its server default too.
for _number in RUN_NUMBERS:
    setattr(
        Run,
        _number.stored,
        mapped_column(
            _number.stored,
            BigInteger,
            nullable=False,
            default=0,
            server_default=None if _number.since is None else text("0"),
        ),
    )


def run_number(name: str) -> KeyedColumnElement[Any]:
    """The column of the run number stored as ``name`` (``hits``, ``compile_ms``...)."""
    return Run.__table__.c[name]


class RunMiss(Base):
    """One compile a run reported: the key it wrote and what the client knew of it (migration 0010).

    ``module`` is the graph's name where the client knew it (JAX's module name from the file name);
    ``components`` maps JAX's cache-key component names to their hashes (``None`` for torch_xla or when
    unknown); ``load_failed`` is True when an entry of this key was stored but failed to load. The reason
    for the compile is worked out from these, the namespace's graphs and the tombstones when its page of
    the run's detail is asked for (``cache_server.runs``), and kept in ``reason`` for the counts. Goes away
    with its run."""

    __tablename__ = "run_misses"
    __table_args__ = (
        Index("ix_run_misses_namespace_module", "namespace", "module"),
        Index("ix_run_misses_namespace_key", "namespace", "key"),
    )

    run_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(256), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(128))
    module: Mapped[str | None] = mapped_column(String(256), nullable=True)
    components: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)
    compile_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    load_failed: Mapped[bool] = mapped_column(Boolean, default=False)
    reported_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    # the reason the run's detail last gave it (migration 0018): counted per reason, never explained again
    reason: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # where the job compiled it, file:line (migration 0019): the call site of a torch_xla mark_step/sync
    source: Mapped[str | None] = mapped_column(String(200), nullable=True)


class Tombstone(Base):
    """An entry that was stored and then removed, kept for a bounded time (migration 0010), so that a
    later compile of the same key can be explained: when it went, and by which ``policy`` (``lru``,
    ``max_age``, ``admin`` for an explicit eviction, ``namespace_deleted``, ``purge``, ``damaged``).
    A new store of the key removes its tombstone. No foreign key: the entry is gone."""

    __tablename__ = "tombstones"
    __table_args__ = (Index("ix_tombstones_removed_at", "removed_at"),)

    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    key: Mapped[str] = mapped_column(String(256), primary_key=True)
    removed_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    policy: Mapped[str] = mapped_column(String(32))
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    compile_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
