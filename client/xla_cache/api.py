"""The HTTP API v1 as Python calls, with every failure turned into a :class:`ServerProblem` naming why.

One :class:`CacheApi` per server; it is safe to share between threads (httpx's client is). Every call takes a
:class:`Deadline`: no single wait on the network exceeds what is left of it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import ssl
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from cache_protocol import COMPILE_TIME_HEADER, LIVE_HEADER, SHA256_HEADER, UPLOADER_HEADER
from cache_protocol import MAX_KEYS_PER_REQUEST as SERVER_MAX_KEYS
from cache_protocol.signing import SIGNATURE_HEADER, Signer
from xla_cache.config import Compression, wants_compression
from xla_cache.deadline import Deadline
from xla_cache.errors import ServerError, ServerUnavailable

__all__ = ["MAX_KEYS_PER_REQUEST", "CacheApi", "FeedAnswer", "Manifest", "RemoteEntry", "normalize_server"]

# Well under the server's default limit on keys in one request, so a server configured lower still takes it.
MAX_KEYS_PER_REQUEST = SERVER_MAX_KEYS // 5
USER_AGENT = "xla-cache-client/0.1"


@dataclass(frozen=True)
class RemoteEntry:
    """An entry as the server lists it in a manifest."""

    key: str
    size: int
    sha256: str
    pack: str | None = None  # the pack holding a copy, where the server keeps packs: bundle these together
    signature: str | None = None  # the uploader's signature, "<key id>:<base64>" (cache_protocol.signing)


@dataclass(frozen=True)
class Manifest:
    """A namespace's manifest: the entries to warm, most useful first, and how many bundles to stream at
    once from this server (its worker processes; None from a server that does not say)."""

    entries: list[RemoteEntry]
    bundle_streams: int | None = None


@dataclass(frozen=True)
class FeedAnswer:
    """One answer of the change feed: the cursor to pass next, and the entries (some maybe seen before)."""

    cursor: int
    entries: list[RemoteEntry]


def _zstd(pieces: Iterator[bytes], level: int = 3) -> Iterator[bytes]:
    """``pieces`` as one zstd frame (executables of one graph at many shapes shrink tens of times)."""
    import zstandard

    compressor = zstandard.ZstdCompressor(level=level).compressobj()
    for piece in pieces:
        out = compressor.compress(piece)
        if out:
            yield out
    yield compressor.flush()


def normalize_server(server: str) -> str:
    """``host:port`` or a URL -> a base URL without a trailing slash."""
    server = server.strip()
    if "://" not in server:
        server = "http://" + server
    return server.rstrip("/")


@functools.lru_cache(maxsize=4)
def _trust(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """httpx's own default context (certifi's roots, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), made once per
    process: loading the roots takes 20-25 ms, which every warm paid before its first request."""
    return httpx.create_ssl_context()


def _seg(name: str) -> str:
    return quote(name, safe="")


class CacheApi:
    """Calls to one cache server."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        compression: Compression | None = None,
        signer: Signer | None = None,
    ) -> None:
        self.server = normalize_server(server)
        self.signer = signer  # signs each entry uploaded (XLA_CACHE_SIGNING_KEY)
        # zstd for bulk uploads, and for bundles except (by default) from a server on loopback
        self.compression = wants_compression(self.server) if compression is None else compression
        headers = {"User-Agent": USER_AGENT, UPLOADER_HEADER: f"{socket.gethostname()}:{os.getpid()}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.server,
            headers=headers,
            transport=transport,
            follow_redirects=True,
            timeout=30.0,
            verify=_trust(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")),
        )

    def close(self) -> None:
        """Close pooled connections."""
        self._http.close()

    def signature(self, namespace: str, key: str, sha256: str) -> str | None:
        """This client's signature of an entry it uploads (None: it has no signing key)."""
        return self.signer.sign(namespace, key, sha256) if self.signer is not None else None

    # -- plumbing -----------------------------------------------------------------------------------------

    def _timeout(self, deadline: Deadline) -> httpx.Timeout:
        return httpx.Timeout(deadline.wait_limit())

    def _unavailable(self, what: str, exc: httpx.HTTPError, deadline: Deadline) -> ServerUnavailable:
        if isinstance(exc, httpx.TimeoutException):
            return ServerUnavailable(
                f"{self.server} did not answer {what} in time ({type(exc).__name__}; the client's timeout is "
                f"{deadline.seconds:g} s)"
            )
        if isinstance(exc, httpx.ConnectError):
            return ServerUnavailable(f"cannot connect to {self.server} for {what} ({exc})")
        return ServerUnavailable(f"{self.server} failed during {what} ({type(exc).__name__}: {exc})")

    def _error(self, what: str, response: httpx.Response) -> ServerError:
        code = detail = ""
        with contextlib.suppress(Exception):
            response.read()
            body = response.json()
            if isinstance(body, dict):
                code = str(body.get("error", ""))
                detail = str(body.get("detail", ""))
        if not detail:
            with contextlib.suppress(Exception):
                detail = response.text[:200].strip()
        reason = f"{self.server} answered {what} with HTTP {response.status_code}"
        if code:
            reason += f" {code}"
        if detail:
            reason += f": {detail}"
        return ServerError(reason, status=response.status_code, code=code, detail=detail)

    def _call(
        self,
        method: str,
        path: str,
        what: str,
        deadline: Deadline,
        *,
        ok: Iterable[int] = (200, 201),
        **kwargs: Any,
    ) -> httpx.Response:
        if deadline.expired():
            raise ServerUnavailable(
                f"no time left for {what} (the client's timeout is {deadline.seconds:g} s)"
            )
        try:
            response = self._http.request(method, path, timeout=self._timeout(deadline), **kwargs)
        except httpx.HTTPError as exc:
            raise self._unavailable(what, exc, deadline) from exc
        if response.status_code not in ok:
            raise self._error(what, response)
        return response

    def _json(self, response: httpx.Response, what: str) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise ServerError(
                f"{self.server} answered {what} with a body that is not JSON",
                status=response.status_code,
            ) from exc

    @contextlib.contextmanager
    def _stream(
        self, method: str, path: str, what: str, deadline: Deadline, **kwargs: Any
    ) -> Iterator[tuple[httpx.Response, Iterator[bytes]]]:
        if deadline.expired():
            raise ServerUnavailable(
                f"no time left for {what} (the client's timeout is {deadline.seconds:g} s)"
            )
        try:
            with self._http.stream(method, path, timeout=self._timeout(deadline), **kwargs) as response:
                if response.status_code != 200:
                    raise self._error(what, response)
                yield response, self._chunks(response, what, deadline)
        except httpx.HTTPError as exc:
            raise self._unavailable(what, exc, deadline) from exc

    def _chunks(self, response: httpx.Response, what: str, deadline: Deadline) -> Iterator[bytes]:
        for chunk in response.iter_bytes():
            if deadline.expired():
                raise ServerUnavailable(
                    f"{self.server} was too slow sending {what} "
                    f"(the client's timeout is {deadline.seconds:g} s)"
                )
            yield chunk

    # -- the API ------------------------------------------------------------------------------------------

    def ready(self, deadline: Deadline) -> dict[str, Any]:
        """``GET /readyz``."""
        return dict(self._json(self._call("GET", "/readyz", "the readiness check", deadline), "/readyz"))

    def register_namespace(
        self, namespace: str, fingerprint: Mapping[str, Any], labels: Mapping[str, str], deadline: Deadline
    ) -> dict[str, Any]:
        """``PUT /v1/namespaces/{ns}``: register or update the namespace with its fingerprint."""
        what = "the namespace registration"
        response = self._call(
            "PUT",
            f"/v1/namespaces/{_seg(namespace)}",
            what,
            deadline,
            json={"fingerprint": dict(fingerprint), "labels": dict(labels)},
        )
        return dict(self._json(response, what))

    def get_namespace(self, namespace: str, deadline: Deadline) -> dict[str, Any]:
        """``GET /v1/namespaces/{ns}``: fingerprint, entry count, bytes and counters."""
        what = "the namespace query"
        return dict(self._json(self._call("GET", f"/v1/namespaces/{_seg(namespace)}", what, deadline), what))

    def nearest(
        self, namespace: str, fingerprint: Mapping[str, Any] | None, deadline: Deadline
    ) -> dict[str, Any]:
        """``POST /v1/namespaces/{ns}/nearest`` with ``fingerprint`` (``GET``, the registered one's, when
        None): the nearest populated namespaces of the same framework and how they differ."""
        what = "the nearest-namespaces query"
        path = f"/v1/namespaces/{_seg(namespace)}/nearest"
        if fingerprint is None:
            response = self._call("GET", path, what, deadline)
        else:
            response = self._call("POST", path, what, deadline, json={"fingerprint": dict(fingerprint)})
        return dict(self._json(response, what))

    def manifest(
        self,
        namespace: str,
        deadline: Deadline,
        *,
        max_bytes: int | None = None,
        max_entries: int | None = None,
    ) -> Manifest:
        """``GET .../manifest``: the entries to warm, most useful first, and how many bundle streams."""
        what = "the manifest request"
        params: dict[str, int] = {}
        if max_bytes is not None:
            params["max_bytes"] = max_bytes
        if max_entries is not None:
            params["max_entries"] = max_entries
        body = self._json(
            self._call("GET", f"/v1/namespaces/{_seg(namespace)}/manifest", what, deadline, params=params),
            what,
        )
        try:
            entries = [
                RemoteEntry(
                    str(item["key"]),
                    int(item["size"]),
                    str(item["sha256"]).lower(),
                    str(item["pack"]) if item.get("pack") else None,
                    str(item["signature"]) if item.get("signature") else None,
                )
                for item in body["entries"]
            ]
            streams = int(body.get("bundle_streams") or 0)  # absent from older servers
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ServerError(f"{self.server} sent a malformed manifest ({exc!r})", status=200) from exc
        return Manifest(self._no_key_twice(entries, "manifest"), streams if streams > 0 else None)

    def missing(self, namespace: str, keys: list[str], deadline: Deadline) -> list[str]:
        """``POST .../missing``: which of ``keys`` the server lacks (asked in batches)."""
        what = "the missing-keys request"
        lacking: list[str] = []
        for start in range(0, len(keys), MAX_KEYS_PER_REQUEST):
            batch = keys[start : start + MAX_KEYS_PER_REQUEST]
            body = self._json(
                self._call(
                    "POST", f"/v1/namespaces/{_seg(namespace)}/missing", what, deadline, json={"keys": batch}
                ),
                what,
            )
            try:
                lacking.extend(str(key) for key in body["missing"])
            except (KeyError, TypeError) as exc:
                raise ServerError(
                    f"{self.server} sent a malformed missing-keys answer ({exc!r})", status=200
                ) from exc
        return lacking

    def bundle(
        self, namespace: str, keys: list[str], deadline: Deadline
    ) -> contextlib.AbstractContextManager[tuple[httpx.Response, Iterator[bytes]]]:
        """``POST .../bundle``: one tar stream of these entries (use as a context manager)."""
        return self._stream(
            "POST",
            f"/v1/namespaces/{_seg(namespace)}/bundle",
            f"the bundle of {len(keys)} entries",
            deadline,
            json={"keys": keys},
            headers={"Accept-Encoding": "zstd" if self.compression.bundles else "identity"},
        )

    def entry(
        self, namespace: str, key: str, deadline: Deadline, *, live: bool = False
    ) -> contextlib.AbstractContextManager[tuple[httpx.Response, Iterator[bytes]]]:
        """``GET .../entries/{key}``: one entry's bytes (use as a context manager); ``live``: fetched by a
        follower (counted by the server as delivered live)."""
        return self._stream(
            "GET",
            f"/v1/namespaces/{_seg(namespace)}/entries/{_seg(key)}",
            f"entry {key}",
            deadline,
            headers={LIVE_HEADER: "1"} if live else None,
        )

    def feed(self, namespace: str, after: int | None, wait: float, deadline: Deadline) -> FeedAnswer:
        """``GET .../feed``: the entries stored after cursor ``after`` (waiting up to ``wait`` seconds for
        one); with ``after`` None, only the cursor to start from."""
        params: dict[str, Any] = {"wait": wait}
        if after is not None:
            params["after"] = after
        what = f"the change feed of {namespace}"
        body = self._json(
            self._call("GET", f"/v1/namespaces/{_seg(namespace)}/feed", what, deadline, params=params), what
        )
        try:
            entries = [
                RemoteEntry(
                    key=str(e["key"]),
                    size=int(e["size"]),
                    sha256=str(e["sha256"]).lower(),
                    signature=str(e["signature"]) if e.get("signature") else None,
                )
                for e in body.get("entries", [])
            ]
            cursor = int(body["cursor"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ServerError(f"{self.server} sent a malformed feed answer ({exc!r})", status=200) from exc
        return FeedAnswer(cursor=cursor, entries=self._no_key_twice(entries, "feed answer", repeats=True))

    def _no_key_twice(
        self, entries: list[RemoteEntry], what: str, *, repeats: bool = False
    ) -> list[RemoteEntry]:
        """``entries``, or a server error for an answer naming a key twice: nothing of it is placed, since
        which of the two a job's check and its bytes would go by is the server's choice. ``repeats``: the
        same entry named again (size, digest and signature alike) is dropped instead (the feed names a key
        once per time it was stored, each time with the key's current row)."""
        seen: dict[str, RemoteEntry] = {}
        for entry in entries:
            first = seen.setdefault(entry.key, entry)
            if first is not entry and not (repeats and first == entry):
                raise ServerError(
                    f"{self.server} sent a {what} naming entry {entry.key[:80]!r} twice; none of it is used",
                    status=200,
                )
        return list(seen.values())

    def put_entry(
        self,
        namespace: str,
        key: str,
        chunks: Iterator[bytes],
        *,
        size: int,
        sha256: str,
        compile_time_ms: int | None,
        deadline: Deadline,
    ) -> int:
        """``PUT .../entries/{key}``, streamed. Returns 201 (stored), 200 (already there) or 409 (another
        digest already stored; the server keeps the first)."""
        headers = {
            SHA256_HEADER: sha256,
            "Content-Length": str(size),
            "Content-Type": "application/octet-stream",
        }
        if compile_time_ms is not None:
            headers[COMPILE_TIME_HEADER] = str(compile_time_ms)
        if (signature := self.signature(namespace, key, sha256)) is not None:
            headers[SIGNATURE_HEADER] = signature
        response = self._call(
            "PUT",
            f"/v1/namespaces/{_seg(namespace)}/entries/{_seg(key)}",
            f"the upload of entry {key}",
            deadline,
            ok=(200, 201, 409),
            content=chunks,
            headers=headers,
        )
        return response.status_code

    def put_entries(
        self, namespace: str, stream: Callable[[], Iterator[bytes]], deadline: Deadline
    ) -> dict[str, Any]:
        """``POST .../entries``: many entries in one tar stream (members with a ``XLA_CACHE.sha256`` PAX
        record), zstd-compressed unless :attr:`compression` says not; sent again uncompressed to a server that
        answers 415 to that. ``stream`` makes the tar stream (each call anew). Returns the server's answer:
        every member's status, as a PUT of it would have had."""
        what = "a bulk upload"
        path = f"/v1/namespaces/{_seg(namespace)}/entries"
        plain = {"Content-Type": "application/x-tar"}
        if self.compression.uploads:
            try:
                response = self._call(
                    "POST",
                    path,
                    what,
                    deadline,
                    ok=(200,),
                    content=_zstd(stream()),
                    headers={**plain, "Content-Encoding": "zstd"},
                )
                return dict(self._json(response, what))
            except ServerError as exc:
                if exc.status != 415:
                    raise
        response = self._call("POST", path, what, deadline, ok=(200,), content=stream(), headers=plain)
        return dict(self._json(response, what))

    def admin_stats(
        self, deadline: Deadline, *, limit: int | None = None, after: str | None = None
    ) -> dict[str, Any]:
        """``GET /admin/stats`` (needs an admin token when auth is on): one page of namespaces, ``limit``
        of them (the server's default page when None) after the cursor ``after`` (a page's
        ``next_after``)."""
        what = "the admin stats request"
        params = {name: value for name, value in (("limit", limit), ("after", after)) if value is not None}
        return dict(self._json(self._call("GET", "/admin/stats", what, deadline, params=params), what))

    def admin_graphs(
        self, namespace: str, deadline: Deadline, *, top: int = 10, module: str | None = None
    ) -> dict[str, Any]:
        """``GET /admin/graphs``: the namespace's bucketing report (a read token or stronger that reaches the
        namespace, as for the dashboard's graph view); with ``module``, that graph's only."""
        what = "the graphs report"
        params: dict[str, Any] = {"namespace": namespace, "top": top}
        if module is not None:
            params["module"] = module
        return dict(self._json(self._call("GET", "/admin/graphs", what, deadline, params=params), what))

    def admin_evict(self, body: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
        """``POST /admin/evict`` (needs an admin token when auth is on)."""
        what = "the eviction request"
        return dict(self._json(self._call("POST", "/admin/evict", what, deadline, json=body), what))

    def admin_tokens(self, deadline: Deadline) -> dict[str, Any]:
        """``GET /admin/tokens``: every token and what it stored (admin token)."""
        what = "the token listing"
        return dict(self._json(self._call("GET", "/admin/tokens", what, deadline), what))

    def admin_quotas(self, deadline: Deadline) -> dict[str, Any]:
        """``GET /admin/quotas``: every quota with what its namespace or token stores now (admin token)."""
        what = "the quota listing"
        return dict(self._json(self._call("GET", "/admin/quotas", what, deadline), what))

    def admin_set_quota(
        self, kind: str, subject: str, body: dict[str, Any], deadline: Deadline
    ) -> dict[str, Any]:
        """``PUT /admin/quotas/{kind}/{subject}``: set (both limits null: remove) the quota of a namespace or
        of the tokens with a name or id (admin token)."""
        what = f"the quota of {kind} {subject!r}"
        path = f"/admin/quotas/{_seg(kind)}/{_seg(subject)}"
        return dict(self._json(self._call("PUT", path, what, deadline, json=body), what))

    def admin_signers(self, deadline: Deadline) -> dict[str, Any]:
        """``GET /admin/signers``: entries and bytes per signer key id (admin token)."""
        what = "the signers request"
        return dict(self._json(self._call("GET", "/admin/signers", what, deadline), what))

    def admin_purge_signer(self, signer: str, body: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
        """``POST /admin/signers/{key id or unsigned}/purge``: remove what a key signed (admin token)."""
        what = f"the purge of signer {signer!r}"
        path = f"/admin/signers/{_seg(signer)}/purge"
        return dict(self._json(self._call("POST", path, what, deadline, json=body), what))

    def admin_purge_token(self, token: str, body: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
        """``POST /admin/tokens/{token}/purge``: revoke a token and remove what it stored (admin token)."""
        what = f"the purge of token {token!r}"
        path = f"/admin/tokens/{_seg(token)}/purge"
        return dict(self._json(self._call("POST", path, what, deadline, json=body), what))

    # -- run reports (issue 27) ---------------------------------------------------------------------------

    def post_run(self, body: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
        """``POST /v1/runs``: one report of a run (:mod:`cache_protocol.runs`)."""
        what = "the run report"
        response = self._call("POST", "/v1/runs", what, deadline, json=body)
        with contextlib.suppress(ServerError):
            answer = self._json(response, what)
            return dict(answer) if isinstance(answer, dict) else {}
        return {}

    def admin_runs(self, params: Mapping[str, Any], deadline: Deadline) -> dict[str, Any]:
        """``GET /admin/runs``: the runs reported, newest first, filtered by ``params`` (namespace,
        framework, host, since, until, limit)."""
        what = "the run listing"
        query = {name: value for name, value in params.items() if value is not None}
        return dict(self._json(self._call("GET", "/admin/runs", what, deadline, params=query), what))

    def admin_run(
        self, run_id: str, deadline: Deadline, *, offset: int = 0, limit: int = 100
    ) -> dict[str, Any]:
        """``GET /admin/runs/{id}``: one run (``run_id`` may be a unique prefix) with a page of its misses
        and why each compiled, and the count of each reason."""
        what = f"run {run_id}"
        params = {"offset": offset, "limit": limit}
        path = f"/admin/runs/{_seg(run_id)}"
        return dict(self._json(self._call("GET", path, what, deadline, params=params), what))
