"""What a blob carries about its entry: written with the bytes by the one writer
(:mod:`cache_server.service.writer`), read back by reindex (:mod:`cache_server.admin.reindex`) and by an
upload that finds the blob already stored. One type, so the two sides cannot drift.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from cache_protocol import UPLOADER_MAX_LENGTH
from cache_protocol.signing import parse_signature
from cache_server.index.entries import EntryRecord
from cache_server.names import check_key, check_namespace
from cache_server.storage.base import BlobInfo, split_blob_name

__all__ = ["BlobMetadata"]

_TOKEN_ID = re.compile(r"[0-9a-f]{1,32}")  # a token's public id, as the writer records it


def _signature(value: str | None) -> str | None:
    """A signature as metadata keeps it, if it is one (a damaged one is dropped: the entry is unsigned)."""
    if not value:
        return None
    try:
        return parse_signature(value).text()
    except ValueError:
        return None


def _optional_int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


@dataclass(frozen=True)
class BlobMetadata:
    """An entry's facts as its blob's metadata keeps them: enough to rebuild its index row.

    ``sha256`` is the digest the upload announced and the writer checked ("" when read from a blob whose
    metadata lacks one); ``created`` when it was stored; ``stored_by`` the id of the token that sent it.
    """

    namespace: str
    key: str
    sha256: str
    created: dt.datetime
    compile_time_ms: int | None = None
    uploader: str | None = None
    stored_by: str | None = None
    signature: str | None = None  # the uploader's, "<key id>:<base64>" (cache_protocol.signing)
    signer: str | None = None  # the signature's key id, only if the server verified it with a key it knows

    def as_dict(self) -> dict[str, str]:
        """The metadata a store keeps beside the bytes (strings only; absent fields left out)."""
        meta = {
            "namespace": self.namespace,
            "key": self.key,
            "sha256": self.sha256,
            "created": self.created.isoformat(),
        }
        if self.compile_time_ms is not None:
            meta["compile_time_ms"] = str(self.compile_time_ms)
        if self.uploader:
            meta["uploader"] = self.uploader
        if self.stored_by:
            meta["stored_by"] = self.stored_by
        if self.signature:
            meta["signature"] = self.signature
            if self.signer:
                meta["signer"] = self.signer
        return meta

    @classmethod
    def of(cls, info: BlobInfo) -> BlobMetadata:
        """Read a stored blob's metadata, leniently where a field can be told another way: the name from
        the blob's name, the creation time from the store's; an unreadable compile time or token id is
        dropped. Raises :class:`~cache_server.errors.InvalidName` or :class:`ValueError` when the names in
        it are invalid or are not the blob's own."""
        meta = info.metadata
        by_name = split_blob_name(info.name)
        namespace = check_namespace(meta.get("namespace") or by_name[0])
        key = check_key(meta.get("key") or by_name[1])
        if (namespace, key) != by_name:
            raise ValueError(f"its metadata names {namespace}/{key}")
        created = info.created
        if meta.get("created"):
            created = dt.datetime.fromisoformat(meta["created"])
            if created.tzinfo is None:
                created = created.replace(tzinfo=dt.timezone.utc)
        uploader = meta.get("uploader") or None
        stored_by = meta.get("stored_by") or ""
        signature = _signature(meta.get("signature"))
        return cls(
            namespace=namespace,
            key=key,
            sha256=meta.get("sha256", "").lower(),
            created=created,
            compile_time_ms=_optional_int(meta.get("compile_time_ms")),
            uploader=uploader[:UPLOADER_MAX_LENGTH] if uploader else None,
            stored_by=stored_by if _TOKEN_ID.fullmatch(stored_by) else None,
            signature=signature,
            # verified by the writer that wrote it (a blob from before it recorded this: unverified)
            signer=meta.get("signer") if signature and meta.get("signer") == signature[:16] else None,
        )

    def record(self, size: int, *, pack: str | None = None, pack_offset: int | None = None) -> EntryRecord:
        """The index row of the entry these facts describe, its bytes ``size`` long."""
        return EntryRecord(
            namespace=self.namespace,
            key=self.key,
            size=size,
            sha256=self.sha256,
            created_at=self.created,
            compile_time_ms=self.compile_time_ms,
            uploader=self.uploader,
            stored_by=self.stored_by,
            pack=pack,
            pack_offset=pack_offset,
            signer=self.signer if self.signature else None,  # verified only: /admin/signers, purges
            signature=self.signature,
        )
