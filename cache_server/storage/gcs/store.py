"""The GCS blob store: blob names as object names, and the :class:`~cache_server.storage.base.BlobStore`
operations as JSON API requests through the backend's one :class:`~.transport.Transport`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

from google.api_core.datetime_helpers import from_rfc3339
from google.auth.credentials import AnonymousCredentials, Credentials, Signing
from google.cloud import storage

from cache_server.errors import InvalidName
from cache_server.storage.base import BlobInfo, parse_blob_name
from cache_server.storage.gcs.reader import GcsReader
from cache_server.storage.gcs.transport import (
    VENDOR_ERRORS,
    Transport,
    default_credentials,
    emulator_endpoint,
)
from cache_server.storage.gcs.upload import CHUNK_MULTIPLE, DEFAULT_CHUNK_SIZE, upload

__all__ = ["MAX_SIGNED_URL_SECONDS", "GcsBlobStore"]

MAX_SIGNED_URL_SECONDS = 7 * 24 * 3600  # the V4 limit
READY_TIMEOUT_SECONDS = 5.0


class GcsBlobStore:
    """Blobs as objects in a Google Cloud Storage bucket; safe for concurrent use by threads and hosts.

    ``timeout`` bounds each HTTP request; ``retries`` is how often a request that failed transiently is
    repeated, after ``backoff`` seconds doubling up to ``max_backoff``. ``chunk_size`` is the piece of a
    resumable upload held in memory and sent per request (a multiple of 256 KiB). ``endpoint`` (or the
    ``STORAGE_EMULATOR_HOST`` variable) points at an emulator, whose default credentials are anonymous;
    otherwise ``credentials`` replace Application Default Credentials. ``project`` is kept as
    :attr:`project` (by default the credentials' own): requests for objects need none.

    Also a :class:`~cache_server.storage.base.SignsUrls`: signing credentials give direct download URLs.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        credentials: Credentials | None = None,
        project: str | None = None,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 16.0,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        if not bucket:
            raise ValueError("A Google Cloud Storage store needs a bucket name.")
        if chunk_size <= 0 or chunk_size % CHUNK_MULTIPLE:
            raise ValueError(f"chunk_size must be a positive multiple of {CHUNK_MULTIPLE} bytes.")
        if retries < 0:
            raise ValueError("retries must not be negative.")
        self.bucket_name = bucket
        self.prefix = prefix.strip("/")
        self._object_prefix = f"{self.prefix}/" if self.prefix else ""
        self.endpoint = emulator_endpoint(endpoint)
        if credentials is None and self.endpoint is not None:
            credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
        elif credentials is None:
            credentials, found_project = default_credentials(bucket)
            project = project or found_project
        self.project = project
        self._chunk_size = chunk_size
        # google-cloud-storage signs locally (or through IAM, with the credentials' own session); its client
        # only supplies the universe domain, so an anonymous one that never sends a request will do.
        self._signer = storage.Client.create_anonymous_client() if isinstance(credentials, Signing) else None
        self._transport = Transport(
            bucket,
            credentials,
            emulator=self.endpoint,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
        )

    @classmethod
    def from_url(cls, url: str, *, timeout: float = 30.0, retries: int = 5) -> GcsBlobStore:
        """Build from ``gs://bucket`` or ``gs://bucket/prefix``."""
        parsed = urlparse(url)
        if parsed.scheme != "gs" or not parsed.netloc:
            raise ValueError(f"Storage URL {url!r} is not of the form gs://bucket/prefix.")
        return cls(parsed.netloc, parsed.path, timeout=timeout, retries=retries)

    # -- names -------------------------------------------------------------------------------------------
    def _object_name(self, name: str) -> str:
        parse_blob_name(name)
        return self._object_prefix + name

    def _blob_name(self, object_name: str) -> str | None:
        """The blob name of an object under the prefix, or None for an object that is not a blob."""
        name = object_name[len(self._object_prefix) :]
        try:
            parse_blob_name(name)
        except InvalidName:
            return None
        return name

    @staticmethod
    def _info(name: str, resource: Mapping[str, Any]) -> BlobInfo:
        """The blob's info from its object's JSON resource."""
        created: dt.datetime = (
            from_rfc3339(resource["timeCreated"])  # type: ignore[no-untyped-call]
            if resource.get("timeCreated")
            else dt.datetime.now(dt.timezone.utc)
        )
        metadata = resource.get("metadata") or {}
        return BlobInfo(
            name=name, size=int(resource.get("size", 0)), created=created, metadata=dict(metadata)
        )

    # -- the BlobStore operations ------------------------------------------------------------------------
    def put(self, name: str, chunks: Iterable[bytes], metadata: Mapping[str, str]) -> bool:
        object_name = self._object_name(name)
        return upload(self._transport, name, object_name, chunks, metadata, chunk_size=self._chunk_size)

    def open(self, name: str) -> GcsReader | None:
        object_name = self._object_name(name)
        resource = self._transport.get_object(f"look up {name!r} in", object_name)
        if resource is None:
            return None
        url = self._transport.media_url(object_name, str(resource["generation"]))
        return GcsReader.open(self._transport, self._info(name, resource), url)

    def stat(self, name: str) -> BlobInfo | None:
        resource = self._transport.get_object(f"look up {name!r} in", self._object_name(name))
        return None if resource is None else self._info(name, resource)

    def delete(self, name: str) -> bool:
        url = self._transport.object_url(self._object_name(name))
        response = self._transport.call(f"delete {name!r} from", "DELETE", url, expect=(200, 204, 404))
        response.close()
        return response.status_code != 404

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        params = {"prefix": self._object_prefix + prefix, "projection": "noAcl"}
        while True:
            response = self._transport.call(
                "list", "GET", self._transport.objects_url, expect=(200,), params=params
            )
            page = response.json()
            for resource in page.get("items", []):
                name = self._blob_name(resource["name"])
                if name is not None:
                    yield self._info(name, resource)
            if not page.get("nextPageToken"):
                return
            params["pageToken"] = page["nextPageToken"]

    def check(self) -> None:
        """List at most one object under the prefix: needs only object permissions, like everything else.

        One attempt with a short timeout: readiness must answer quickly, not after the retry policy.
        """
        transport = self._transport
        params = {"prefix": self._object_prefix, "maxResults": "1", "projection": "noAcl"}
        timeout = min(transport.timeout, READY_TIMEOUT_SECONDS)
        try:
            transport.request(
                "GET", transport.objects_url, expect=(200,), params=params, timeout=timeout
            ).close()
        except VENDOR_ERRORS as exc:
            raise transport.unavailable("reach", exc, attempts=1) from exc

    def close(self) -> None:
        self._transport.close()

    # -- direct downloads (SignsUrls) --------------------------------------------------------------------
    def signed_url(self, name: str, expires_seconds: int) -> str | None:
        """A V4 signed URL that lets anyone GET the blob's bytes for ``expires_seconds`` (at most 7 days).

        Returns ``None`` when the credentials cannot sign: only signing credentials can (a service-account
        key file, impersonated credentials), not the anonymous ones used with an emulator, a user's
        credentials, or those of a VM's metadata server. The URL is made locally without checking that the
        blob exists. Raises :class:`ValueError` for an expiry out of range and
        :class:`~cache_server.errors.StorageUnavailable` if signing needed a service that failed.
        """
        if not 1 <= expires_seconds <= MAX_SIGNED_URL_SECONDS:
            raise ValueError(f"A signed URL lasts 1 to {MAX_SIGNED_URL_SECONDS} s, not {expires_seconds}.")
        if self._signer is None:
            return None
        blob = self._signer.bucket(self.bucket_name).blob(self._object_name(name))
        try:
            url: str = blob.generate_signed_url(
                version="v4",
                expiration=dt.timedelta(seconds=expires_seconds),
                method="GET",
                credentials=self._transport.credentials,
                api_access_endpoint=self._transport.signing_endpoint,
            )
        except VENDOR_ERRORS as exc:
            raise self._transport.unavailable(f"sign a URL for {name!r} in", exc) from exc
        return url
