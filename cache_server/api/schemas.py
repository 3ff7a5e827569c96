"""Request and response bodies of the v1 API."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

__all__ = [
    "EntryOut",
    "KeysRequest",
    "ManifestEntry",
    "ManifestOut",
    "MissingOut",
    "NamespaceIn",
    "NamespaceOut",
    "PutOut",
    "SignedUrlOut",
    "SignedUrlsOut",
]


class NamespaceIn(BaseModel):
    fingerprint: dict[str, Any] = Field(default_factory=dict, description="The runtime fingerprint.")
    labels: dict[str, str] = Field(default_factory=dict, description="Free-form labels for people.")


class NamespaceOut(BaseModel):
    namespace: str
    fingerprint: dict[str, Any]
    labels: dict[str, str]
    created_at: dt.datetime
    last_used_at: dt.datetime
    entries: int
    bytes: int
    hits: int
    misses: int
    uploads: int


class PutOut(BaseModel):
    namespace: str
    key: str
    size: int
    sha256: str
    created: bool


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


class ManifestOut(BaseModel):
    namespace: str
    entries: list[ManifestEntry]
    total_bytes: int


class SignedUrlOut(BaseModel):
    url: str = Field(description="GET it, without credentials, until it expires.")
    size: int
    sha256: str = Field(description="Check the downloaded bytes against it.")


class SignedUrlsOut(BaseModel):
    namespace: str
    expires_in: int = Field(description="Seconds each URL stays valid from now.")
    urls: dict[str, SignedUrlOut] = Field(description="By key: the stored entries among those asked for.")
    missing: list[str] = Field(description="The keys asked for that are not stored.")
