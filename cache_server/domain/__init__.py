"""The objects the services hand out: entries, namespaces, tokens and the counters. No SQL, no HTTP.

The index builds them from its rows (:mod:`cache_server.index`), so no ORM row leaves the index; the routes
turn them into response bodies (:mod:`cache_server.api`).

The counters are defined once, as the fields of :class:`Counters`: each namespace keeps them in its row, the
daily rollup keeps them per namespace and UTC day, and the stats report and its response schemas are built
from :data:`COUNTERS`. A run as the server keeps it is in :mod:`cache_server.domain.runs`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal, NamedTuple

__all__ = [
    "COUNTERS",
    "REMOVAL_POLICIES",
    "Clock",
    "Counters",
    "EntryInfo",
    "EntryRef",
    "NamespaceInfo",
    "RemovalPolicy",
    "TokenInfo",
    "counter_description",
    "utcnow",
]

RemovalPolicy = Literal["lru", "max_age", "admin", "namespace_deleted", "purge", "damaged", "lost"]
"""Why an entry was removed, as its tombstone records it: eviction to meet a budget (``lru``) or of what
was unused too long (``max_age``), an explicit removal of the entry (``admin``), its namespace deleted, its
token purged, its bytes found damaged, or its blob found lost (gc). Every removal names one."""
REMOVAL_POLICIES: Final[tuple[RemovalPolicy, ...]] = (
    "lru",
    "max_age",
    "admin",
    "namespace_deleted",
    "purge",
    "damaged",
    "lost",
)

Clock = Callable[[], dt.datetime]
"""What the services read the time from (aware UTC); tests pass their own to age entries without sleeping."""


def utcnow() -> dt.datetime:
    """Now, as an aware UTC datetime: the default :data:`Clock`."""
    return dt.datetime.now(dt.timezone.utc)


def _counter(description: str) -> int:
    return field(default=0, metadata={"description": description})


@dataclass
class Counters:
    """What a namespace (or all of them, or one day of one) served and received; each field is a counter."""

    hits: int = _counter("Entries served: downloads, bundle members and signed URLs handed out.")
    misses: int = _counter("Entries asked for that were not stored.")
    uploads: int = _counter("Entries stored by an upload.")
    evictions: int = _counter("Entries evicted (budgets, age or an admin's request).")
    bytes_served: int = _counter("Bytes of the entries served.")
    bytes_uploaded: int = _counter("Bytes of the entries stored by an upload.")
    compile_ms_saved: int = _counter(
        "Sum over hits of the compile time the uploader reported (X-Compile-Time-Ms), in milliseconds."
    )
    live_deliveries: int = _counter(
        "Entries delivered live: fetched by a following job while it ran, soon after another job stored them."
    )
    live_compile_ms_saved: int = _counter(
        "Sum over live deliveries of the compile time the uploader reported, in milliseconds."
    )

    @property
    def hit_rate(self) -> float | None:
        """Hits over lookups; None before the first lookup."""
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else None

    def add(self, other: Counters) -> None:
        """Add ``other``'s counts to these."""
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Counters:
        """The counters among ``values`` (missing ones and NULLs count as zero)."""
        return cls(**{name: int(values.get(name) or 0) for name in COUNTERS})


COUNTERS: tuple[str, ...] = tuple(f.name for f in fields(Counters))
"""The counters' names: the columns of ``namespaces`` and ``daily_stats`` that hold them."""


def counter_description(name: str) -> str:
    """What the counter ``name`` counts, for people (the API's schema descriptions)."""
    description: str = next(f.metadata["description"] for f in fields(Counters) if f.name == name)
    return description


@dataclass(frozen=True)
class EntryInfo:
    """One stored entry as the index knows it."""

    namespace: str
    key: str
    size: int
    sha256: str
    created_at: dt.datetime
    last_access_at: dt.datetime
    hits: int = 0
    compile_time_ms: int | None = None
    uploader: str | None = None  # what the client said it was (X-Uploader): a label, not proof
    stored_by: str | None = None  # the id of the token that stored it (None with auth off)
    pack: str | None = None  # the pack holding a copy of its bytes, if one does (cache_server.service.packs)
    pack_offset: int | None = None  # where in that pack
    signer: str | None = None  # the key id of the uploader's signature, if it signed (cache_protocol.signing)
    signature: str | None = None  # that signature, "<key id>:<base64>"


class EntryRef(NamedTuple):
    """An entry as a manifest and a bundle need it: what its bytes are, when it was stored, and its copy in a
    pack. A lean row (no access times, counters or labels to convert): a manifest of 2,000 on SQLite reads
    in 5.3 ms instead of 12.5 as :class:`EntryInfo`, and a warm waits for two such lookups."""

    namespace: str
    key: str
    size: int
    sha256: str
    created_at: dt.datetime
    pack: str | None = None
    pack_offset: int | None = None
    signature: str | None = None  # the uploader's signature, "<key id>:<base64>", if signed
    uploader: str | None = None  # what the client said it was (X-Uploader): a prefill's marks its entries


@dataclass(frozen=True)
class NamespaceInfo:
    """A namespace: its fingerprint and labels, what it stores now, and its counters."""

    name: str
    fingerprint: dict[str, Any]
    labels: dict[str, str]
    created_at: dt.datetime
    last_used_at: dt.datetime
    entries: int
    bytes: int
    counters: Counters

    @property
    def framework(self) -> str | None:
        """Whose cache the namespace holds (``torch_xla``, ``jax``), as its fingerprint says."""
        framework = self.fingerprint.get("framework")
        return str(framework) if framework else None


@dataclass(frozen=True)
class TokenInfo:
    """A bearer token as listed (never the secret, nor its digest)."""

    id: str
    name: str
    role: str
    created_at: dt.datetime
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None
    namespaces: tuple[str, ...] | None = None  # the namespace patterns it is limited to; None: any
    metrics_off: bool = False  # its run reports are stored but not counted in the xla_cache_run_* metrics
