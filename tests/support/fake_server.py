"""An in-memory fake of the cache server's API v1 on a loopback port, with failure modes.

Built on the shared scripted stub (:mod:`tests.support.http_stub`). The client tests use it only where the
real server cannot be made to misbehave on demand: it hangs, answers 5xx, or sends corrupt bytes or a
stream that is not tar; and for a job in another process (the exit handler), which cannot reach the app in
this one. Ordinary behaviour is checked against the real app (``real_server`` in ``conftest.py``).
"""

from __future__ import annotations

import io
import json
import tarfile
import threading
from dataclasses import dataclass, field
from typing import Any

from cache_protocol import SHA256_HEADER
from tests.support.api import sha
from tests.support.http_stub import Recorded, Reply, StubHttpServer, json_reply

__all__ = ["FakeCacheServer", "sha"]


@dataclass
class FakeCacheServer:
    """Entries by namespace, plus switches that make the server misbehave."""

    entries: dict[str, dict[str, bytes]] = field(default_factory=dict)
    namespaces: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_status: int | None = None  # answer every request with this status
    hang: bool = False  # never answer (until the test ends)
    corrupt_bundle: bool = False  # flip one byte in every bundle member
    garbage_bundle: bool = False  # send bytes that are not a tar stream
    _release: threading.Event = field(default_factory=threading.Event)

    def put(self, namespace: str, key: str, data: bytes) -> None:
        self.entries.setdefault(namespace, {})[key] = data

    def __enter__(self) -> FakeCacheServer:
        self.stub = StubHttpServer(self.answer)
        # A hung request is answered at teardown, after the client gave up: that broken pipe is expected.
        self.stub._server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        self.stub.__enter__()
        self.url = self.stub.url
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self.stub.__exit__(None, None, None)

    @property
    def requests(self) -> list[Recorded]:
        return self.stub.requests

    def paths(self, method: str | None = None) -> list[str]:
        return [r.path for r in self.requests if method is None or r.method == method]

    # -- the API ------------------------------------------------------------------------------------------

    def answer(self, request: Recorded) -> Reply:
        if self.hang:
            self._release.wait(120)
            return Reply(503)
        if self.fail_status is not None:
            return json_reply(
                self.fail_status, {"error": "storage_unavailable", "detail": "The store is down."}
            )
        parts = request.path.strip("/").split("/")
        if request.path == "/readyz":
            return json_reply(200, {"status": "ready"})
        if parts[:2] != ["v1", "namespaces"] or len(parts) < 3:
            return json_reply(404, {"error": "not_found", "detail": request.path})
        ns = parts[2]
        stored = self.entries.setdefault(ns, {})
        rest = parts[3:]
        if not rest and request.method == "PUT":
            body = json.loads(request.body)
            created = ns not in self.namespaces
            self.namespaces[ns] = body
            return json_reply(201 if created else 200, {"namespace": ns, **body})
        if not rest and request.method == "GET":
            if ns not in self.namespaces:
                return json_reply(404, {"error": "namespace_not_found", "detail": "never registered"})
            return json_reply(
                200,
                {
                    "namespace": ns,
                    "fingerprint": self.namespaces[ns].get("fingerprint", {}),
                    "entries": len(stored),
                    "bytes": sum(len(v) for v in stored.values()),
                    "hits": 0,
                },
            )
        if rest == ["manifest"]:
            limit = int(request.query.get("max_bytes") or 1 << 62)
            listed, total = [], 0
            for key, data in stored.items():
                if total + len(data) > limit:
                    break
                listed.append({"key": key, "size": len(data), "sha256": sha(data)})
                total += len(data)
            return json_reply(200, {"namespace": ns, "entries": listed, "total_bytes": total})
        if rest == ["missing"]:
            keys = json.loads(request.body)["keys"]
            return json_reply(200, {"missing": [k for k in keys if k not in stored]})
        if rest == ["bundle"]:
            keys = json.loads(request.body)["keys"]
            return Reply(200, {"Content-Type": "application/x-tar"}, self._tar(stored, keys))
        if len(rest) == 2 and rest[0] == "entries":
            key = rest[1]
            if request.method == "GET":
                if key not in stored:
                    return json_reply(404, {"error": "entry_not_found", "detail": key})
                data = stored[key]
                if self.corrupt_bundle:
                    data = _flip(data)
                return Reply(200, {SHA256_HEADER: sha(stored[key])}, data)
            if request.method == "PUT":
                digest = request.headers.get(SHA256_HEADER.lower(), "")
                if digest != sha(request.body):
                    return json_reply(400, {"error": "digest_mismatch", "detail": "body does not match"})
                if key in stored:
                    if sha(stored[key]) != digest:
                        return json_reply(409, {"error": "digest_conflict", "detail": "other digest"})
                    status = 200
                else:
                    stored[key] = request.body
                    status = 201
                return json_reply(status, {"namespace": ns, "key": key, "size": len(request.body)})
        return json_reply(404, {"error": "not_found", "detail": request.path})

    def _tar(self, stored: dict[str, bytes], keys: list[str]) -> bytes:
        if self.garbage_bundle:
            return b"this is not a tar stream at all" * 100
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for key in keys:
                if key not in stored:
                    continue
                data = _flip(stored[key]) if self.corrupt_bundle else stored[key]
                info = tarfile.TarInfo(key)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        return buffer.getvalue()


def _flip(data: bytes) -> bytes:
    if not data:
        return data
    return bytes([data[0] ^ 0xFF]) + data[1:]
