"""Google Cloud Storage blob store: ``gs://bucket/prefix``.

Layout: the blob ``<namespace>/<key>`` is the object ``<prefix>/<namespace>/<key>``. The metadata map given to
:meth:`GcsBlobStore.put` is the object's custom metadata; ``BlobInfo.created`` is the object's creation time
as GCS records it.

How the contract of :mod:`cache_server.storage.base` holds here:

* **Create-only.** Every upload carries ``ifGenerationMatch=0``: GCS refuses (412) to create an object that
  exists, atomically, so of concurrent puts one wins and the others drain their chunks and return False.
* **All or nothing.** A body of at most :data:`MULTIPART_LIMIT` bytes is sent in one request, only after the
  chunks iterator has finished. A larger body goes through a resumable upload session: full chunks as they
  fill, and the final chunk (the only one that makes the object exist) only after the iterator is exhausted.
  If anything raises first, the session is cancelled (DELETE) and the error re-raised; an unfinished session
  never becomes visible in any case.
* **Streaming.** An upload holds at most one chunk (``chunk_size``, 16 MiB by default) of pieces, never
  joined; a download is one streamed GET read :data:`READ_CHUNK` bytes at a time, resumed with a Range request
  if the connection drops, and pinned to the generation :meth:`~GcsBlobStore.open` saw.
* **Errors.** 404 is a miss. 408, 429, 5xx, dropped connections and timeouts are retried with exponential
  backoff, at most ``retries`` times per request; what still fails, and every other vendor error, becomes
  :class:`~cache_server.errors.StorageUnavailable` naming the bucket.

Credentials are Application Default Credentials. With ``STORAGE_EMULATOR_HOST`` set (the variable Google's
own libraries read) or an explicit ``endpoint``, requests go there, with anonymous credentials by default.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import quote, urlparse

import google.auth
import requests
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials, Credentials, Signing
from google.cloud import storage
from requests.adapters import HTTPAdapter

from cache_server.errors import InvalidName, StorageUnavailable
from cache_server.names import check_key, check_namespace
from cache_server.storage._gcs_errors import (
    VENDOR_ERRORS,
    Exists,
    HttpError,
    Retry,
    describe,
    is_transient,
    status_of,
)
from cache_server.storage._gcs_reader import READ_CHUNK, GcsReader
from cache_server.storage._gcs_upload import Pending, Upload
from cache_server.storage.base import BlobInfo

__all__ = ["DEFAULT_CHUNK_SIZE", "MULTIPART_LIMIT", "READ_CHUNK", "GcsBlobStore"]

MIB = 1024 * 1024
MULTIPART_LIMIT = 8 * MIB
"""Bodies up to this size are uploaded in one request; larger ones through a resumable session."""
DEFAULT_CHUNK_SIZE = 16 * MIB
MAX_SIGNED_URL_SECONDS = 7 * 24 * 3600  # the V4 limit
READY_TIMEOUT_SECONDS = 5.0
EMULATOR_PROJECT = "xla-cache-emulator"
_CHUNK_MULTIPLE = 256 * 1024  # GCS wants every non-final chunk to be a multiple of this
_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)


def _emulator_host() -> str | None:
    host = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    return host or None


def _with_scheme(endpoint: str) -> str:
    endpoint = endpoint.rstrip("/")
    return endpoint if "://" in endpoint else f"http://{endpoint}"


class GcsBlobStore:
    """Blobs as objects in a Google Cloud Storage bucket; safe for concurrent use by threads and hosts.

    ``timeout`` bounds each HTTP request; ``retries`` is how often a request that failed transiently is
    repeated, after ``backoff`` seconds doubling up to ``max_backoff``. ``chunk_size`` is the piece of a
    resumable upload held in memory and sent per request (a multiple of 256 KiB). ``endpoint`` (or the
    ``STORAGE_EMULATOR_HOST`` variable) points at an emulator; ``credentials`` replace the default ones.
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
        if chunk_size <= 0 or chunk_size % _CHUNK_MULTIPLE:
            raise ValueError(f"chunk_size must be a positive multiple of {_CHUNK_MULTIPLE} bytes.")
        if retries < 0:
            raise ValueError("retries must not be negative.")
        self.bucket_name = bucket
        self.prefix = prefix.strip("/")
        self._object_prefix = f"{self.prefix}/" if self.prefix else ""
        raw_endpoint = endpoint or _emulator_host()
        self.endpoint = _with_scheme(raw_endpoint) if raw_endpoint else None
        self._timeout = timeout
        self._retry = Retry(retries, backoff, max_backoff)
        self._chunk_size = chunk_size
        self._credentials, self._client = self._make_client(credentials, project)
        # google-cloud-storage 3.x fetches bucket metadata in the background to label its traces: an extra
        # request that needs storage.buckets.get, which an object-only role lacks. We do not trace; skip it.
        self._client._bucket_metadata_cache = None
        self._bucket = self._client.bucket(bucket)
        self._api_endpoint: str = self._client.api_endpoint.rstrip("/")
        # The client's authorised session, with a pool large enough for a threaded server (unless it was
        # set up for mutual TLS, whose adapter must stay).
        self._session: requests.Session = self._client._http
        if not getattr(self._session, "is_mtls", False):
            adapter = HTTPAdapter(pool_connections=4, pool_maxsize=64)
            self._session.mount("https://", adapter)
            self._session.mount("http://", adapter)

    @classmethod
    def from_url(cls, url: str, *, timeout: float = 30.0, retries: int = 5) -> GcsBlobStore:
        """Build from ``gs://bucket`` or ``gs://bucket/prefix``."""
        parsed = urlparse(url)
        if parsed.scheme != "gs" or not parsed.netloc:
            raise ValueError(f"Storage URL {url!r} is not of the form gs://bucket/prefix.")
        return cls(parsed.netloc, parsed.path, timeout=timeout, retries=retries)

    def _make_client(
        self, credentials: Credentials | None, project: str | None
    ) -> tuple[Credentials, storage.Client]:
        if self.endpoint is not None:
            credentials = credentials or AnonymousCredentials()  # type: ignore[no-untyped-call]
            client = storage.Client(
                project=project or EMULATOR_PROJECT,
                credentials=credentials,
                client_options={"api_endpoint": self.endpoint},
            )
            return credentials, client
        if credentials is None:
            try:
                credentials, found_project = google.auth.default(scopes=_SCOPES)
            except auth_exceptions.DefaultCredentialsError as exc:
                raise StorageUnavailable(
                    f"No Google Cloud credentials were found for bucket {self.bucket_name!r}: set "
                    "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, run "
                    "`gcloud auth application-default login`, or run on a VM or pod with a service account."
                ) from exc
            project = project or found_project
        return credentials, storage.Client(project=project, credentials=credentials)

    # -- names and errors --------------------------------------------------------------------------------
    def _object_name(self, name: str) -> str:
        namespace, _, key = name.partition("/")
        check_namespace(namespace)
        check_key(key)
        return self._object_prefix + name

    def _blob_name(self, object_name: str) -> str | None:
        """The blob name of an object under the prefix, or None for an object that is not a blob."""
        name = object_name[len(self._object_prefix) :]
        namespace, _, key = name.partition("/")
        try:
            check_namespace(namespace)
            check_key(key)
        except InvalidName:
            return None
        return name

    def _unavailable(
        self,
        action: str,
        exc: BaseException,
        missing: str = "the bucket does not exist",
        attempts: int | None = None,
    ) -> StorageUnavailable:
        """The error to raise for ``exc``; ``missing`` says what a 404 means for this request.

        ``attempts``: how many tries were made (the retry policy's count unless the caller says).
        """
        status = status_of(exc)
        attempts = self._retry.retries + 1 if attempts is None else attempts
        if is_transient(exc) and attempts == 1:
            reason = f"it failed ({describe(exc)})"
        elif is_transient(exc):
            reason = f"it still failed after {attempts} attempts ({describe(exc)})"
        elif status in (401, 403):
            reason = f"access was refused ({describe(exc)}); check that the credentials may use its objects"
        elif status in (404, 410):
            reason = missing
        else:
            reason = describe(exc)
        return StorageUnavailable(
            f"Cannot {action} Google Cloud Storage bucket {self.bucket_name!r}: {reason}."
        )

    def _info(self, name: str, blob: storage.Blob) -> BlobInfo:
        created = blob.time_created or dt.datetime.now(dt.timezone.utc)
        return BlobInfo(
            name=name, size=int(blob.size or 0), created=created, metadata=dict(blob.metadata or {})
        )

    # -- writing -----------------------------------------------------------------------------------------
    def put(self, name: str, chunks: Iterable[bytes], metadata: Mapping[str, str]) -> bool:
        blob = self._bucket.blob(self._object_name(name))
        blob.metadata = dict(metadata)
        pieces = iter(chunks)
        pending = Pending()
        for piece in pieces:
            pending.add(piece)
            if pending.size > MULTIPART_LIMIT:
                return self._put_resumable(name, blob, pending, pieces)
        return self._put_small(name, blob, pending.joined())

    def _put_small(self, name: str, blob: storage.Blob, data: bytes) -> bool:
        try:
            blob.upload_from_string(
                data,
                content_type="application/octet-stream",
                if_generation_match=0,
                checksum="crc32c",
                retry=self._retry,
                timeout=self._timeout,
            )
        except api_exceptions.PreconditionFailed:
            return False
        except VENDOR_ERRORS as exc:
            raise self._unavailable(f"store {name!r} in", exc) from exc
        return True

    def _put_resumable(
        self, name: str, blob: storage.Blob, pending: Pending, pieces: Iterator[bytes]
    ) -> bool:
        try:
            # GCS would refuse the body at its end anyway; do not upload it for nothing.
            exists = self._bucket.get_blob(blob.name, retry=self._retry, timeout=self._timeout) is not None
            url = None if exists else self._start_session(blob)
        except api_exceptions.PreconditionFailed:
            url = None
        except VENDOR_ERRORS as exc:
            raise self._unavailable(f"store {name!r} in", exc) from exc
        if url is None:
            for _ in pieces:  # let a checking iterator see every byte
                pass
            return False
        upload = Upload(self._session, url, retry=self._retry, timeout=self._timeout)
        try:
            for piece in pieces:
                pending.add(piece)
                while pending.size >= self._chunk_size:
                    self._send(name, upload, pending.take(self._chunk_size))
            self._send(name, upload, pending.take(pending.size), crc32c=pending.crc32c())
        except Exists:
            upload.cancel()
            for _ in pieces:
                pass
            return False
        except BaseException:
            upload.cancel()
            raise
        return True

    def _start_session(self, blob: storage.Blob) -> str:
        url: str = blob.create_resumable_upload_session(
            content_type="application/octet-stream",
            if_generation_match=0,
            checksum=None,  # the final chunk carries the CRC32C of the whole object
            retry=self._retry,
            timeout=self._timeout,
        )
        return url

    def _send(self, name: str, upload: Upload, pieces: list[memoryview], crc32c: bytes | None = None) -> None:
        try:
            upload.send(pieces, crc32c=crc32c)
        except VENDOR_ERRORS as exc:
            gone = f"its resumable upload session has expired ({describe(exc)})"
            raise self._unavailable(f"store {name!r} in", exc, gone) from exc

    # -- reading -----------------------------------------------------------------------------------------
    def _get_blob(self, name: str) -> storage.Blob | None:
        object_name = self._object_name(name)
        try:
            blob: storage.Blob | None = self._bucket.get_blob(
                object_name, retry=self._retry, timeout=self._timeout
            )
        except VENDOR_ERRORS as exc:
            raise self._unavailable(f"look up {name!r} in", exc) from exc
        return blob

    def _get_media(self, name: str, url: str, offset: int) -> requests.Response | None:
        """Start a streamed GET of the object's bytes from ``offset``; None if it is gone."""
        headers = {"Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"

        def get() -> requests.Response | None:
            response = self._session.get(url, headers=headers, stream=True, timeout=self._timeout)
            if response.status_code == (206 if offset else 200):
                return response
            response.close()
            if response.status_code == 404:
                return None
            raise HttpError(response)

        try:
            return self._retry.run(get)
        except VENDOR_ERRORS as exc:
            raise self._unavailable(f"read {name!r} from", exc) from exc

    def open(self, name: str) -> GcsReader | None:
        blob = self._get_blob(name)
        if blob is None:
            return None
        url = (
            f"{self._api_endpoint}/download/storage/v1/b/{quote(self.bucket_name, safe='')}/o/"
            f"{quote(blob.name, safe='')}?alt=media&generation={blob.generation}"
        )
        response = self._get_media(name, url, 0)
        if response is None:  # deleted since the lookup
            return None
        return GcsReader(
            self._info(name, blob),
            url,
            response,
            bucket_name=self.bucket_name,
            retry=self._retry,
            get_media=self._get_media,
            unavailable=self._unavailable,
        )

    def stat(self, name: str) -> BlobInfo | None:
        blob = self._get_blob(name)
        return None if blob is None else self._info(name, blob)

    def delete(self, name: str) -> bool:
        object_name = self._object_name(name)
        try:
            self._bucket.delete_blob(object_name, retry=self._retry, timeout=self._timeout)
        except api_exceptions.NotFound:
            return False
        except VENDOR_ERRORS as exc:
            raise self._unavailable(f"delete {name!r} from", exc) from exc
        return True

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        try:
            for blob in self._client.list_blobs(
                self._bucket, prefix=self._object_prefix + prefix, retry=self._retry, timeout=self._timeout
            ):
                name = self._blob_name(blob.name)
                if name is not None:
                    yield self._info(name, blob)
        except VENDOR_ERRORS as exc:
            raise self._unavailable("list", exc) from exc

    def check(self) -> None:
        """List at most one object under the prefix: needs only object permissions, like everything else.

        One attempt with a short timeout: readiness must answer quickly, not after the retry policy.
        """
        try:
            next(
                iter(
                    self._client.list_blobs(
                        self._bucket,
                        prefix=self._object_prefix,
                        max_results=1,
                        retry=None,
                        timeout=min(self._timeout, READY_TIMEOUT_SECONDS),
                    )
                ),
                None,
            )
        except VENDOR_ERRORS as exc:
            raise self._unavailable("reach", exc, attempts=1) from exc

    def close(self) -> None:
        self._client.close()

    # -- direct downloads --------------------------------------------------------------------------------
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
        if not isinstance(self._credentials, Signing):
            return None
        blob = self._bucket.blob(self._object_name(name))
        try:
            url: str = blob.generate_signed_url(
                version="v4",
                expiration=dt.timedelta(seconds=expires_seconds),
                method="GET",
                credentials=self._credentials,
                api_access_endpoint=self.endpoint,
            )
        except VENDOR_ERRORS as exc:
            raise self._unavailable(f"sign a URL for {name!r} in", exc) from exc
        return url
