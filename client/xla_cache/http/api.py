"""The HTTP API v1 as Python calls (a job's: namespaces, manifests, bundles, entries, uploads, the feed, run
reports), with every failure turned into a :class:`ServerProblem` naming why
(:mod:`xla_cache.http.server_http`).

One :class:`CacheApi` per server; it is safe to share between threads (httpx's client is). Every call takes a
:class:`Deadline`: no single wait on the network exceeds what is left of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from cache_protocol import COMPILE_TIME_HEADER, LIVE_HEADER, SHA256_HEADER, UPLOADER_HEADER
from cache_protocol import MAX_KEYS_PER_REQUEST as SERVER_MAX_KEYS
from cache_protocol.signing import SIGNATURE_HEADER, Signer
from xla_cache.config import Compression, auto_compression
from xla_cache.errors import ServerError
from xla_cache.http.deadline import Deadline
from xla_cache.http.lean_httpx import httpx
from xla_cache.http.server_http import ServerHttp

__all__ = [
    "MAX_KEYS_PER_REQUEST",
    "CacheApi",
    "FeedAnswer",
    "Manifest",
    "RemoteEntry",
    "seg",
]

# Well under the server's default limit on keys in one request, so a server configured lower still takes it.
MAX_KEYS_PER_REQUEST = SERVER_MAX_KEYS // 5


@dataclass(frozen=True)
class RemoteEntry:
    """An entry as the server lists it in a manifest."""

    key: str
    size: int
    sha256: str
    pack: str | None = None  # the pack holding a copy, where the server keeps packs: bundle these together
    signature: str | None = None  # the uploader's signature, "<key id>:<base64>" (cache_protocol.signing)
    prefilled: str | None = None  # a prefill stored it: its uploader (cache_protocol.prefill)


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


def seg(name: str) -> str:
    """``name`` as one path segment of a URL (every reserved character quoted)."""
    return quote(name, safe="")


class CacheApi(ServerHttp):
    """Calls to one cache server: what a job needs (namespaces, manifests, bundles, entries, uploads, the
    feed, run reports); the admin calls are :class:`~xla_cache.http.admin_api.AdminApi`'s. A context manager
    (closes its connections) or :meth:`close` it."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        compression: Compression | None = None,
        signer: Signer | None = None,
    ) -> None:
        super().__init__(server, token, transport=transport)
        self.signer = signer  # signs each entry uploaded (XLA_CACHE_SIGNING_KEY)
        # zstd for bulk uploads, and for bundles except from a server on loopback (ClientConfig.compression:
        # as XLA_CACHE_COMPRESSION says)
        self.compression = auto_compression(self.server) if compression is None else compression

    def signature(self, namespace: str, key: str, sha256: str) -> str | None:
        """This client's signature of an entry it uploads (None: it has no signing key)."""
        return self.signer.sign(namespace, key, sha256) if self.signer is not None else None

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
            f"/v1/namespaces/{seg(namespace)}",
            what,
            deadline,
            json={"fingerprint": dict(fingerprint), "labels": dict(labels)},
        )
        return dict(self._json(response, what))

    def get_namespace(self, namespace: str, deadline: Deadline) -> dict[str, Any]:
        """``GET /v1/namespaces/{ns}``: fingerprint, entry count, bytes and counters."""
        what = "the namespace query"
        return dict(self._json(self._call("GET", f"/v1/namespaces/{seg(namespace)}", what, deadline), what))

    def nearest(
        self, namespace: str, fingerprint: Mapping[str, Any] | None, deadline: Deadline
    ) -> dict[str, Any]:
        """``POST /v1/namespaces/{ns}/nearest`` with ``fingerprint`` (``GET``, the registered one's, when
        None): the nearest populated namespaces of the same framework and how they differ."""
        what = "the nearest-namespaces query"
        path = f"/v1/namespaces/{seg(namespace)}/nearest"
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
            self._call("GET", f"/v1/namespaces/{seg(namespace)}/manifest", what, deadline, params=params),
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
                    str(item["prefilled"]) if item.get("prefilled") else None,
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
                    "POST",
                    f"/v1/namespaces/{seg(namespace)}/missing",
                    what,
                    deadline,
                    json={"keys": batch},
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
            f"/v1/namespaces/{seg(namespace)}/bundle",
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
            f"/v1/namespaces/{seg(namespace)}/entries/{seg(key)}",
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
            self._call("GET", f"/v1/namespaces/{seg(namespace)}/feed", what, deadline, params=params),
            what,
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
        uploader: str | None = None,
    ) -> int:
        """``PUT .../entries/{key}``, streamed. Returns 201 (stored), 200 (already there) or 409 (another
        digest already stored; the server keeps the first). ``uploader``: ``X-Uploader``, kept with it."""
        headers = {
            SHA256_HEADER: sha256,
            "Content-Length": str(size),
            "Content-Type": "application/octet-stream",
        }
        if compile_time_ms is not None:
            headers[COMPILE_TIME_HEADER] = str(compile_time_ms)
        if uploader:
            headers[UPLOADER_HEADER] = uploader
        if (signature := self.signature(namespace, key, sha256)) is not None:
            headers[SIGNATURE_HEADER] = signature
        response = self._call(
            "PUT",
            f"/v1/namespaces/{seg(namespace)}/entries/{seg(key)}",
            f"the upload of entry {key}",
            deadline,
            ok=(200, 201, 409),
            content=chunks,
            headers=headers,
        )
        return response.status_code

    def put_entries(
        self,
        namespace: str,
        stream: Callable[[], Iterator[bytes]],
        deadline: Deadline,
        *,
        uploader: str | None = None,
    ) -> dict[str, Any]:
        """``POST .../entries``: many entries in one tar stream (members with a ``XLA_CACHE.sha256`` PAX
        record), zstd-compressed unless :attr:`compression` says not; sent again uncompressed to a server that
        answers 415 to that. ``stream`` makes the tar stream (each call anew). Returns the server's answer:
        every member's status, as a PUT of it would have had. ``uploader``: ``X-Uploader``, kept with each."""
        what = "a bulk upload"
        path = f"/v1/namespaces/{seg(namespace)}/entries"
        plain = {"Content-Type": "application/x-tar", **({UPLOADER_HEADER: uploader} if uploader else {})}
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

    def graph_variants(
        self,
        namespace: str,
        module: str | None,
        deadline: Deadline,
        *,
        after: str | None = None,
        limit: int = 500,
    ) -> dict[str, Any]:
        """``GET /admin/graphs/variants``: a page of ``module``'s shape variants in ``namespace`` (each its
        shapes text and parameters parsed; ``next`` the cursor), or with no module the namespace's graphs."""
        what = "the graph's variants"
        given = (("namespace", namespace), ("module", module), ("after", after), ("limit", limit))
        params = {name: value for name, value in given if value is not None}
        return dict(
            self._json(self._call("GET", "/admin/graphs/variants", what, deadline, params=params), what)
        )

    # -- run reports (issue 27) ---------------------------------------------------------------------------

    def latest_run_runtime(
        self, namespace: str, deadline: Deadline, *, look_at: int = 20
    ) -> tuple[str, dict[str, Any]] | None:
        """``GET /admin/runs?namespace=``: the latest of the namespace's last ``look_at`` runs that recorded
        its key components (``runtime``), as (run id, components); None when none did."""
        what = "the namespace's runs"
        body = self._json(
            self._call(
                "GET", "/admin/runs", what, deadline, params={"namespace": namespace, "limit": look_at}
            ),
            what,
        )
        for run in body.get("runs") or []:
            runtime = run.get("runtime") if isinstance(run, dict) else None
            if isinstance(runtime, dict) and runtime:
                return str(run.get("run_id")), runtime
        return None

    def post_run(self, body: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
        """``POST /v1/runs``: one report of a run (:mod:`cache_protocol.runs`)."""
        what = "the run report"
        response = self._call("POST", "/v1/runs", what, deadline, json=body)
        with contextlib.suppress(ServerError):
            answer = self._json(response, what)
            return dict(answer) if isinstance(answer, dict) else {}
        return {}
