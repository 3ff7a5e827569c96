"""The GCS blob store: blob names as object names, and the :class:`~cache_server.storage.base.BlobStore`
operations as JSON API requests through the backend's one :class:`~.transport.Transport`.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any
from urllib.parse import urlparse

from google.api_core.datetime_helpers import from_rfc3339
from google.auth.credentials import AnonymousCredentials, Credentials, Signing
from google.cloud import storage

from cache_server.errors import InvalidName
from cache_server.storage.base import (
    MIB,
    PACK_DIR,
    BlobInfo,
    BlobReader,
    ReplaceJudge,
    check_pack_id,
    parse_blob_name,
)
from cache_server.storage.batches import ConcurrentBatch
from cache_server.storage.gcs.reader import GcsReader
from cache_server.storage.gcs.transport import (
    VENDOR_ERRORS,
    Transport,
    default_credentials,
    emulator_endpoint,
)
from cache_server.storage.gcs.upload import CHUNK_MULTIPLE, DEFAULT_CHUNK_SIZE, upload
from cache_server.storage.gcs.url_signing import (
    IAM_ENDPOINT,
    SIGNING_CONCURRENCY,
    IamSigner,
    SigningRefused,
    service_account_of,
)
from cache_server.storage.reading import HeldReader

__all__ = ["MAX_SIGNED_URL_SECONDS", "GcsBlobStore"]

MAX_SIGNED_URL_SECONDS = 7 * 24 * 3600  # the V4 limit
READY_TIMEOUT_SECONDS = 5.0
BATCH_WORKERS = 64  # object uploads of one batch in flight at once
BATCH_BUFFER = 4 * MIB  # a blob up to this size waits for a worker in memory (64 x 4 MiB at most)
META_HEADER = "x-goog-meta-"


_TOO_LARGE = HeldReader(BlobInfo(name="", size=0, created=dt.datetime.min), [])
"""What a whole read returns for an object larger than its limit that it cannot stream: it is opened."""


class _Generation(HeldReader):
    """What a whole read returns for an object larger than its limit: its info and generation (from the
    response's headers), streamed with one more GET."""

    def __init__(self, info: BlobInfo, generation: str) -> None:
        super().__init__(info, [])
        self.generation = generation


class GcsBlobStore:
    """Blobs as objects in a Google Cloud Storage bucket; safe for concurrent use by threads and hosts.

    ``timeout`` bounds each HTTP request; ``retries`` is how often a request that failed transiently is
    repeated, after ``backoff`` seconds doubling up to ``max_backoff``. ``chunk_size`` is the piece of a
    resumable upload held in memory and sent per request (a multiple of 256 KiB). ``endpoint`` (or the
    ``STORAGE_EMULATOR_HOST`` variable) points at an emulator, whose default credentials are anonymous;
    otherwise ``credentials`` replace Application Default Credentials. ``project`` is kept as
    :attr:`project` (by default the credentials' own): requests for objects need none.

    Also a :class:`~cache_server.storage.abilities.SignsUrls`: direct download URLs, signed locally by
    credentials that hold a key (a key file, impersonated credentials), else through the IAM Credentials API
    at ``iam_endpoint`` as the service account the credentials act as (a VM's attached account; see
    :mod:`.signing`), or as ``signing_service_account`` if given.

    Also a :class:`~cache_server.storage.abilities.ReadsWhole`: a small blob is one GET of its bytes, whose
    response headers carry what a whole read needs (:meth:`read_whole`); and a
    :class:`~cache_server.storage.abilities.ReadsAhead`: ``read_ahead``, how many small blobs a bundle reads
    at once, one round trip each; ``read_ahead_bytes``, how many bytes they may hold together.

    Also a :class:`~cache_server.storage.abilities.StoresPacks`, on by default: objects under ``.packs/``
    beside the namespaces, each read with ranged GETs.
    """

    read_ahead = 32
    read_ahead_bytes = 64 * MIB
    packs_by_default = True

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
        signing_service_account: str | None = None,
        iam_endpoint: str = IAM_ENDPOINT,
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
        self._transport = Transport(
            bucket,
            credentials,
            emulator=self.endpoint,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
        )
        # Credentials with a key sign locally (impersonated ones through IAM, with their own session); others
        # that name a service account sign as it through IAM, via this store's transport policy.
        self._iam: IamSigner | None = None
        local = isinstance(credentials, Signing) and signing_service_account in (
            None,
            getattr(credentials, "signer_email", None),
        )
        if not local and (signing_service_account or service_account_of(credentials)):
            self._iam = IamSigner(
                self._transport, credentials, service_account=signing_service_account, endpoint=iam_endpoint
            )
        # google-cloud-storage builds the V4 URL; its client only supplies the universe domain, so an
        # anonymous one that never sends a request will do.
        self._signer = storage.Client.create_anonymous_client() if local or self._iam else None
        self._sign_pool: ThreadPoolExecutor | None = None
        self._sign_pool_lock = threading.Lock()

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
        """The blob's info from its object's JSON resource (damaged if its size, time or metadata cannot be
        read: GCS itself never writes such a resource, but a proxy or another tool might)."""
        try:
            created: dt.datetime = (
                from_rfc3339(resource["timeCreated"])  # type: ignore[no-untyped-call]
                if resource.get("timeCreated")
                else dt.datetime.now(dt.timezone.utc)
            )
            size = int(resource.get("size", 0))
            metadata = resource.get("metadata") or {}
            if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
                raise TypeError("its metadata is not a map of strings")
        except (ValueError, TypeError, KeyError) as exc:
            reason = f"its object resource cannot be read ({type(exc).__name__}: {exc})"
            return BlobInfo(name=name, size=0, created=dt.datetime.now(dt.timezone.utc), damaged=reason)
        return BlobInfo(name=name, size=size, created=created, metadata=dict(metadata))

    # -- the BlobStore operations ------------------------------------------------------------------------
    def put(
        self,
        name: str,
        chunks: Iterable[bytes],
        metadata: Mapping[str, str],
        *,
        replace: ReplaceJudge | None = None,
    ) -> bool:
        object_name = self._object_name(name)
        judge = None if replace is None else (lambda resource: replace(self._info(name, resource)))
        return upload(
            self._transport, name, object_name, chunks, metadata, chunk_size=self._chunk_size, replace=judge
        )

    def open(self, name: str) -> GcsReader | None:
        object_name = self._object_name(name)
        resource = self._transport.get_object(f"look up {name!r} in", object_name)
        if resource is None:
            return None
        url = self._transport.media_url(object_name, str(resource["generation"]))
        return GcsReader.open(self._transport, self._info(name, resource), url)

    def read_whole(self, name: str, limit: int) -> BlobReader | None:
        """One GET of the live object's bytes (the JSON metadata request :meth:`open` makes first is left
        out): held in memory if its Content-Length is at most ``limit``, else dropped unread and the
        generation it named streamed with a second GET (opened as :meth:`open` does, a third request, where
        the response named no generation or size). ``info``: the size read (checked against
        Content-Length), Last-Modified as ``created`` (an object here is never updated), the
        ``x-goog-meta-*`` headers as metadata."""
        object_name = self._object_name(name)
        transport = self._transport
        url = transport.media_url(object_name)
        action = f"read {name!r} from"

        def attempt() -> HeldReader | None:
            response = transport.send(
                "GET", url, expect=(200, 404), headers={"Accept-Encoding": "identity"}, preload=False
            )
            try:
                if response.status == 404:
                    response.drain_conn()
                    return None
                declared = int(response.headers.get("Content-Length", "-1"))
                if not 0 <= declared <= limit:
                    response.close()  # its bytes stay unread: the connection is not reused
                    return self._too_large(name, declared, response.headers)
                data = response.read(decode_content=False)  # urllib3 checks it against Content-Length
                info = self._header_info(name, len(data), response.headers)
                return HeldReader(info, [data] if data else [])
            finally:
                response.release_conn()

        try:
            held = transport.retrying(attempt)
        except VENDOR_ERRORS as exc:
            raise transport.unavailable(action, exc) from exc
        if isinstance(held, _Generation):
            return GcsReader.open(transport, held.info, transport.media_url(object_name, held.generation))
        if held is _TOO_LARGE:
            return self.open(name)
        return held

    def _too_large(self, name: str, declared: int, headers: Mapping[str, str]) -> HeldReader:
        """What :meth:`read_whole` does with an object over its limit: stream the generation the response
        named (its size as declared: stored as sent, never transcoded), else open it anew."""
        generation = headers.get("x-goog-generation", "")
        encoding = headers.get("x-goog-stored-content-encoding", "identity")
        if declared < 0 or not generation.isdigit() or encoding != "identity":
            return _TOO_LARGE
        return _Generation(self._header_info(name, declared, headers), generation)

    @staticmethod
    def _header_info(name: str, size: int, headers: Mapping[str, str]) -> BlobInfo:
        try:
            created = email.utils.parsedate_to_datetime(headers.get("Last-Modified", ""))
        except (TypeError, ValueError):
            created = dt.datetime.now(dt.timezone.utc)
        # Header names lose their case on the way (the emulator capitalizes them): keys here are lowercase.
        metadata = {
            k[len(META_HEADER) :].lower(): v for k, v in headers.items() if k.lower().startswith(META_HEADER)
        }
        return BlobInfo(name=name, size=size, created=created, metadata=metadata)

    def stat(self, name: str) -> BlobInfo | None:
        resource = self._transport.get_object(f"look up {name!r} in", self._object_name(name))
        return None if resource is None else self._info(name, resource)

    def delete(self, name: str) -> bool:
        return self._delete_object(self._object_name(name), f"delete {name!r} from")

    def set_aside(self, name: str) -> bool:
        """A damaged object is deleted (a bucket keeps no quarantine; object versioning, if on, keeps it)."""
        return self._delete_object(self._object_name(name), f"set aside damaged {name!r} in")

    def _delete_object(self, object_name: str, action: str) -> bool:
        url = self._transport.object_url(object_name)
        response = self._transport.call(action, "DELETE", url, expect=(200, 204, 404))
        response.close()
        return response.status_code != 404

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        for resource in self._objects(self._object_prefix + prefix, "list"):
            name = self._blob_name(resource["name"])
            if name is not None:
                yield self._info(name, resource)

    def _objects(self, prefix: str, action: str) -> Iterator[dict[str, Any]]:
        """The JSON resource of every object whose name starts with ``prefix``, page by page."""
        params = {"prefix": prefix, "projection": "noAcl"}
        while True:
            response = self._transport.call(
                action, "GET", self._transport.objects_url, expect=(200,), params=params
            )
            page = response.json()
            yield from page.get("items", [])
            if not page.get("nextPageToken"):
                return
            params["pageToken"] = page["nextPageToken"]

    # -- packs (StoresPacks) ----------------------------------------------------------------------------
    def _pack_object(self, pack_id: str) -> str:
        return f"{self._object_prefix}{PACK_DIR}/{check_pack_id(pack_id)}"

    def put_pack(self, pack_id: str, pieces: Sequence[bytes]) -> None:
        object_name = self._pack_object(pack_id)
        chunk_size = self._chunk_size
        if not upload(self._transport, f"pack {pack_id}", object_name, pieces, {}, chunk_size=chunk_size):
            raise ValueError(f"The pack {pack_id} exists already.")

    def read_pack(self, pack_id: str, start: int, length: int) -> bytes | None:
        """One ranged GET of the live object (retried as any request)."""
        if length <= 0:
            return b""
        url = self._transport.media_url(self._pack_object(pack_id))
        headers = {"Accept-Encoding": "identity", "Range": f"bytes={start}-{start + length - 1}"}
        response = self._transport.call_short(
            f"read pack {pack_id} from", "GET", url, expect=(200, 206, 404, 416), headers=headers
        )
        if response.status == 404:
            return None
        if response.status == 416:  # the range starts past the end: a pack shorter than the index says
            return b""
        data = bytes(response.data)
        return data[start : start + length] if response.status == 200 else data  # 200: the range was ignored

    def delete_pack(self, pack_id: str) -> bool:
        return self._delete_object(self._pack_object(pack_id), f"delete pack {pack_id} from")

    def list_packs(self) -> Iterator[BlobInfo]:
        prefix = f"{self._object_prefix}{PACK_DIR}/"
        for resource in self._objects(prefix, "list packs in"):
            pack_id = resource["name"][len(prefix) :]
            try:
                check_pack_id(pack_id)
            except InvalidName:
                continue
            yield self._info(pack_id, resource)

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

    def batch(self) -> ConcurrentBatch:
        """Puts of many small blobs with their round trips overlapped (see
        :class:`~cache_server.storage.abilities.PutsInBatches`): each is durable when GCS answers it."""
        return ConcurrentBatch(self, workers=BATCH_WORKERS, buffer_limit=BATCH_BUFFER)

    def close(self) -> None:
        if self._sign_pool is not None:
            self._sign_pool.shutdown(wait=True, cancel_futures=True)
        if self._iam is not None:
            self._iam.close()
        self._transport.close()

    # -- direct downloads (SignsUrls) --------------------------------------------------------------------
    def signed_url(self, name: str, expires_seconds: int) -> str | None:
        """A V4 signed URL that lets anyone GET the blob's bytes for ``expires_seconds`` (at most 7 days).

        Returns ``None`` when the credentials cannot sign: neither a key (a service-account key file,
        impersonated credentials) nor a service account to sign as through IAM (anonymous credentials with an
        emulator, a user's), or when IAM refused to sign as the account lately (a missing role: logged, see
        :mod:`.signing`). The URL is made without checking that the blob exists; through IAM it costs one
        round trip (:meth:`signed_urls` makes many at once). Raises :class:`~cache_server.errors.InvalidName`
        for a bad name (whether or not it could sign), :class:`ValueError` for an expiry out of range and
        :class:`~cache_server.errors.StorageUnavailable` if signing needed a service that failed.
        """
        self._check_expiry(expires_seconds)
        self._object_name(name)  # a bad name is refused even where nothing can sign
        if self._signer is None or (self._iam is not None and self._iam.refused()):
            return None
        try:
            return self._sign(name, expires_seconds)
        except SigningRefused:
            return None

    def signed_urls(self, names: Sequence[str], expires_seconds: int) -> dict[str, str] | None:
        """:meth:`signed_url` for each of ``names`` (by name), or ``None`` when the credentials cannot sign.

        Through IAM up to :data:`~.signing.SIGNING_CONCURRENCY` signing calls run at once (shared by every
        caller of this store), so a batch of a thousand takes a few dozen round trips, not a thousand. Every
        name is checked before anything is signed; the first failure is raised at once and the rest abandoned.
        """
        self._check_expiry(expires_seconds)
        unique = list(dict.fromkeys(names))
        for name in unique:
            self._object_name(name)
        if self._signer is None or (self._iam is not None and self._iam.refused()):
            return None
        if self._iam is None or len(unique) < 2:  # local signing: CPU-bound, threads would not help
            try:
                return {name: self._sign(name, expires_seconds) for name in unique}
            except SigningRefused:
                return None
        pool = self._signing_pool()
        futures = {name: pool.submit(self._sign, name, expires_seconds) for name in unique}
        done, _ = wait(futures.values(), return_when=FIRST_EXCEPTION)
        failure = next((exc for future in done if (exc := future.exception()) is not None), None)
        if failure is None:
            return {name: future.result() for name, future in futures.items()}
        for future in futures.values():
            future.cancel()  # those not started; the few running finish on their own
        if isinstance(failure, SigningRefused):
            return None
        raise failure

    @staticmethod
    def _check_expiry(expires_seconds: int) -> None:
        if not 1 <= expires_seconds <= MAX_SIGNED_URL_SECONDS:
            raise ValueError(f"A signed URL lasts 1 to {MAX_SIGNED_URL_SECONDS} s, not {expires_seconds}.")

    def _signing_pool(self) -> ThreadPoolExecutor:
        with self._sign_pool_lock:
            if self._sign_pool is None:
                self._sign_pool = ThreadPoolExecutor(SIGNING_CONCURRENCY, thread_name_prefix="gcs-sign")
            return self._sign_pool

    def _sign(self, name: str, expires_seconds: int) -> str:
        """The URL, signed; SigningRefused when IAM refuses, StorageUnavailable when signing failed."""
        assert self._signer is not None
        blob = self._signer.bucket(self.bucket_name).blob(self._object_name(name))
        if self._iam is None:
            credentials: Credentials | IamSigner = self._transport.credentials
            action = f"sign a URL for {name!r} in"
        else:
            credentials = self._iam
            action = f"sign a URL for {name!r} through the IAM Credentials API ({self._iam.endpoint}) for"
        try:
            url: str = blob.generate_signed_url(
                version="v4",
                expiration=dt.timedelta(seconds=expires_seconds),
                method="GET",
                credentials=credentials,
                api_access_endpoint=self._transport.signing_endpoint,
            )
        except VENDOR_ERRORS as exc:
            raise self._transport.unavailable(action, exc) from exc
        return url
