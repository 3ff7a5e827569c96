"""Request and response bodies of the v1 API."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import TYPE_CHECKING, Any, get_type_hints

from pydantic import BaseModel, Field, create_model, field_validator

from cache_protocol.text import unprintable
from cache_server.domain import NamespaceInfo

__all__ = [
    "INDEX_INT_MAX",
    "BulkMemberOut",
    "BulkOut",
    "EntryOut",
    "FeedEntryOut",
    "FeedOut",
    "KeysRequest",
    "ManifestEntry",
    "ManifestOut",
    "MissingOut",
    "NamespaceIn",
    "NamespaceOut",
    "PutOut",
    "SignedUrlOut",
    "SignedUrlsOut",
    "bounded_fingerprint",
    "json_body",
    "namespace_out",
]


INDEX_INT_MAX = 2**63 - 1
"""The largest whole number the index holds (SQLite and PostgreSQL integers are 64-bit signed): the upper
bound of every count, size and cursor a request may carry that has no smaller meaningful bound."""
MAX_FINGERPRINT_DEPTH = 8
MAX_FINGERPRINT_BYTES = 64 * 1024
MAX_LABELS = 64
MAX_LABEL_LENGTH = 256


def _depth(value: Any) -> int:
    """How deeply JSON containers nest in ``value`` (a scalar is 0)."""
    depth, level = 0, [value]
    while level:
        containers = [v for v in level if isinstance(v, dict | list)]
        if not containers:
            return depth
        depth += 1
        level = [child for c in containers for child in (c.values() if isinstance(c, dict) else c)]
    return depth


def bounded_fingerprint(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` if it is a fingerprint the server takes (nesting and size bounded), else ValueError."""
    if _depth(value) > MAX_FINGERPRINT_DEPTH:
        raise ValueError(f"the fingerprint nests deeper than {MAX_FINGERPRINT_DEPTH} levels")
    if len(json.dumps(value)) > MAX_FINGERPRINT_BYTES:
        raise ValueError(f"the fingerprint is larger than {MAX_FINGERPRINT_BYTES} bytes as JSON")
    return value


class NamespaceIn(BaseModel):
    fingerprint: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            f"The runtime fingerprint: JSON nested at most {MAX_FINGERPRINT_DEPTH} levels, "
            f"at most {MAX_FINGERPRINT_BYTES} bytes."
        ),
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        description=f"Labels for people (at most {MAX_LABELS}, each at most {MAX_LABEL_LENGTH} characters).",
    )

    @field_validator("fingerprint")
    @classmethod
    def _bounded_fingerprint(cls, value: dict[str, Any]) -> dict[str, Any]:
        return bounded_fingerprint(value)

    @field_validator("labels")
    @classmethod
    def _bounded_labels(cls, value: dict[str, str]) -> dict[str, str]:
        if any(len(k) > MAX_LABEL_LENGTH or len(v) > MAX_LABEL_LENGTH for k, v in value.items()):
            raise ValueError(f"a label's name or value is longer than {MAX_LABEL_LENGTH} characters")
        for text in (t for item in value.items() for t in item):  # text for people: no escape sequences
            if problem := unprintable(text):
                raise ValueError(f"label {text!r}: {problem}")
        return value


NAMESPACE_COUNTERS = ("hits", "misses", "uploads")
"""The counters a namespace's body shows (``GET /admin/stats`` shows them all)."""


def _namespace_fields() -> dict[str, tuple[Any, Any]]:
    """The body's fields, made from :class:`~cache_server.domain.NamespaceInfo`'s in their order: ``name``
    as ``namespace``, ``counters`` as the :data:`NAMESPACE_COUNTERS`, every other field as it is."""
    types = get_type_hints(NamespaceInfo)
    defined: dict[str, tuple[Any, Any]] = {}
    for field in fields(NamespaceInfo):
        if field.name == "name":
            defined["namespace"] = (str, ...)
        elif field.name == "counters":
            defined.update((name, (int, ...)) for name in NAMESPACE_COUNTERS)
        else:
            defined[field.name] = (types[field.name], ...)
    return defined


# Its fields come from NamespaceInfo, so a field added there reaches the body by itself.
if TYPE_CHECKING:
    NamespaceOut = BaseModel
else:
    NamespaceOut = create_model("NamespaceOut", **_namespace_fields())


def namespace_out(ns: NamespaceInfo) -> NamespaceOut:
    """The body of a namespace, as :func:`_namespace_fields` made it."""
    values = {field.name: getattr(ns, field.name) for field in fields(NamespaceInfo)}
    values["namespace"] = values.pop("name")
    counters = values.pop("counters")
    values.update((name, getattr(counters, name)) for name in NAMESPACE_COUNTERS)
    return NamespaceOut(**values)


class PutOut(BaseModel):
    namespace: str
    key: str
    size: int
    sha256: str
    created: bool


class BulkMemberOut(BaseModel):
    key: str
    status: int = Field(
        description="What a PUT of this entry would have answered: 201, 200, 400, 409 or 413."
    )
    size: int | None = None
    sha256: str | None = None
    error: str | None = Field(default=None, description="The error code, for a refused member.")
    detail: str | None = None


class BulkOut(BaseModel):
    namespace: str
    stored: int = Field(description="Members stored now (201).")
    already_stored: int = Field(description="Members stored before with the same digest (200).")
    refused: int = Field(description="Members refused (400, 409, 413); nothing of them was stored.")
    results: list[BulkMemberOut] = Field(description="Every member's outcome, in stream order.")


class EntryOut(BaseModel):
    key: str
    size: int
    sha256: str


class KeysRequest(BaseModel):
    keys: list[str] = Field(description="Entry keys (at most XLA_CACHE_MAX_KEYS_PER_REQUEST).")


class MissingOut(BaseModel):
    missing: list[str]


class ManifestEntry(BaseModel):
    key: str
    size: int
    sha256: str
    pack: str | None = Field(
        default=None,
        description=(
            "The pack holding a copy of the entry, if one does: entries of one pack are read together most "
            "cheaply, so a client splitting a warm into several bundles keeps them in one."
        ),
    )
    signature: str | None = Field(
        default=None,
        description="The uploader's Ed25519 signature, '<key id>:<base64>' (null: unsigned).",
    )
    prefilled: str | None = Field(
        default=None,
        description="On an entry a prefill stored (compiled ahead of the target job): its upload's "
        "X-Uploader, 'prefill host=H pid=P [deviceless topology=T] [unverified]' (null: a job's own).",
    )


class ManifestOut(BaseModel):
    namespace: str
    entries: list[ManifestEntry]
    total_bytes: int
    bundle_streams: int = Field(
        description=(
            "How many bundles a client should stream at once from this server: its worker processes. More "
            "streams than processes share one process's CPU and only slow each other down. (A client "
            "talking to a server from before this field streams up to four.)"
        ),
    )


class FeedEntryOut(BaseModel):
    seq: int = Field(description="Its position in the feed.")
    key: str
    size: int
    sha256: str
    compile_time_ms: int | None = None
    signature: str | None = Field(
        default=None,
        description="The uploader's Ed25519 signature, '<key id>:<base64>' (null: unsigned).",
    )


class FeedOut(BaseModel):
    namespace: str
    cursor: int = Field(description="Pass it as ``after`` next time.")
    entries: list[FeedEntryOut] = Field(description="Oldest first; some may have been given before.")


class SignedUrlOut(BaseModel):
    url: str = Field(description="GET it, without credentials, until it expires.")
    size: int
    sha256: str = Field(description="Check the downloaded bytes against it.")


class SignedUrlsOut(BaseModel):
    namespace: str
    expires_in: int = Field(description="Seconds each URL stays valid from now.")
    urls: dict[str, SignedUrlOut] = Field(description="By key: the stored entries among those asked for.")
    missing: list[str] = Field(description="The keys asked for that are not stored.")


def json_body(out: object) -> bytes:
    """A JSON body written without a response model (for answers with a row per entry, where a model per
    row cost as much as the rest of the answer); it must still be what the route's model says."""
    return json.dumps(out, separators=(",", ":")).encode()
