"""A receiver of run reports for the client's tests: it answers ``POST /v1/runs``, ``GET /admin/runs`` and
``GET /admin/runs/{id}`` itself, checks every report against the wire contract (:mod:`cache_protocol.runs`)
and keeps what it took, and hands every other request to the real server app it wraps.

So a real job warms from and uploads to a real server while its reports are captured whole, whatever the
server's own run routes do:

    with receiving_server(tmp_path) as (url, receiver):
        ...                            # run a job with --server url
        receiver.runs()                # the run ids reported, in order
        receiver.reports_of(run_id)    # each body the run sent

A report out of bounds is answered 400 (``run_report_invalid``) with its problems, kept in
:attr:`RunReceiver.refused` and not stored, as the server refuses it. The admin routes answer in the
server's shapes (``{"runs": [...]}``; a run with ``misses`` listed and ``misses_total``), reasons unknown.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from cache_protocol import is_key, name_problem
from cache_protocol.runs import (
    FRAMEWORKS,
    HOST_MAX_LENGTH,
    MAX_COUNT,
    MAX_HITS_PER_REPORT,
    MAX_MISSES_PER_REPORT,
    MAX_PROCESS_INDEX,
    MAX_SECONDS,
    MODULE_MAX_LENGTH,
    REPORTED_NUMBERS,
    RUN_ID_PATTERN,
    RUN_NUMBERS,
    SOURCE_MAX_LENGTH,
)

__all__ = ["RunReceiver", "no_run_routes", "receiving_server", "report_problems"]

_COUNTS = tuple(number.name for number in REPORTED_NUMBERS if number.unit == "count")
_DURATIONS = tuple(number.name for number in REPORTED_NUMBERS if number.unit == "seconds")
_WORKED_OUT = {  # the numbers the server works out (saved_seconds): 0 here
    number.name: 0.0 if number.unit == "seconds" else 0 for number in RUN_NUMBERS if not number.reported
}
_FIELDS = {
    "run_id",
    "namespace",
    "framework",
    "host",
    "process_index",
    "started_at",
    "ended_at",
    *_COUNTS,
    *_DURATIONS,
    "new_misses",
    "hit_keys",
    "runtime",  # optional: the components of JAX's key the runtime sets (issue 44)
}
_MISS_FIELDS = {"key", "module", "components", "compile_seconds", "load_failed", "source"}
_OLDER_MISS_FIELDS = _MISS_FIELDS - {"source"}  # a server from before misses carried their source


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_seconds(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= MAX_SECONDS
    )


def _is_time(value: Any) -> bool:
    return _is_seconds(value) or (isinstance(value, float) and 0 <= value <= 2**34)


def _miss_problems(index: int, miss: Any, fields: frozenset[str] | set[str] = _MISS_FIELDS) -> list[str]:
    if not isinstance(miss, dict):
        return [f"new_misses[{index}] is not an object"]
    where = f"new_misses[{index}]"
    problems = [f"{where}: unknown field {name!r}" for name in sorted(set(miss) - fields)]
    if not isinstance(miss.get("key"), str) or not is_key(miss["key"]):
        problems.append(f"{where}.key is not a key: {miss.get('key')!r}")
    module = miss.get("module")
    if module is not None and (not isinstance(module, str) or not 0 < len(module) <= MODULE_MAX_LENGTH):
        problems.append(f"{where}.module is not a name of 1 to {MODULE_MAX_LENGTH} characters")
    components = miss.get("components")
    if components is not None and (
        not isinstance(components, dict)
        or not all(isinstance(k, str) and isinstance(v, str) and k and v for k, v in components.items())
    ):
        problems.append(f"{where}.components is not a map of names to hashes")
    spent = miss.get("compile_seconds")
    if spent is not None and not _is_seconds(spent):
        problems.append(f"{where}.compile_seconds is out of bounds: {spent!r}")
    if not isinstance(miss.get("load_failed", False), bool):
        problems.append(f"{where}.load_failed is not a boolean")
    source = miss.get("source")
    if source is not None and (not isinstance(source, str) or not 0 < len(source) <= SOURCE_MAX_LENGTH):
        problems.append(f"{where}.source is not a text of 1 to {SOURCE_MAX_LENGTH} characters")
    return problems


def report_problems(body: Any, *, older: bool = False) -> list[str]:
    """Why ``body`` is not a run report the contract allows (empty when it is); ``older``: as a server from
    before misses carried their ``source`` would find it."""
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    problems = [f"unknown field {name!r}" for name in sorted(set(body) - _FIELDS)]
    runtime = body.get("runtime")
    if runtime is not None and not (isinstance(runtime, dict) and all(isinstance(k, str) for k in runtime)):
        problems.append("runtime is not an object of named components")
    run_id = body.get("run_id")
    if not isinstance(run_id, str) or RUN_ID_PATTERN.fullmatch(run_id) is None:
        problems.append(f"run_id is not a run id: {run_id!r}")
    namespace = body.get("namespace")
    if not isinstance(namespace, str) or name_problem("namespace", namespace) is not None:
        problems.append(f"namespace is not a namespace: {namespace!r}")
    if body.get("framework") not in FRAMEWORKS:
        problems.append(f"framework is not one of {FRAMEWORKS}: {body.get('framework')!r}")
    host = body.get("host")
    if not isinstance(host, str) or not 0 < len(host) <= HOST_MAX_LENGTH:
        problems.append(f"host is not a name of 1 to {HOST_MAX_LENGTH} characters")
    index = body.get("process_index", 0)
    if not _is_int(index) or not 0 <= index <= MAX_PROCESS_INDEX:
        problems.append(f"process_index is out of bounds: {index!r}")
    started, ended = body.get("started_at"), body.get("ended_at")
    if not _is_time(started):
        problems.append(f"started_at is not a time: {started!r}")
    if ended is not None and (not _is_time(ended) or (_is_time(started) and ended < started)):
        problems.append(f"ended_at is not a time after started_at: {ended!r}")
    for name in _COUNTS:
        value = body.get(name, 0)
        if not _is_int(value) or not 0 <= value <= MAX_COUNT:
            problems.append(f"{name} is not a count: {value!r}")
    for name in _DURATIONS:
        if not _is_seconds(body.get(name, 0.0)):
            problems.append(f"{name} is out of bounds: {body.get(name)!r}")
    misses = body.get("new_misses", [])
    if not isinstance(misses, list) or len(misses) > MAX_MISSES_PER_REPORT:
        problems.append(f"new_misses is not a list of at most {MAX_MISSES_PER_REPORT}")
    else:
        for number, miss in enumerate(misses):
            problems += _miss_problems(number, miss, _OLDER_MISS_FIELDS if older else _MISS_FIELDS)
        keys = [miss.get("key") for miss in misses if isinstance(miss, dict)]
        if len(set(map(str, keys))) != len(keys):
            problems.append("new_misses names a key twice")
    hits = body.get("hit_keys", [])
    if not isinstance(hits, list) or len(hits) > MAX_HITS_PER_REPORT:
        problems.append(f"hit_keys is not a list of at most {MAX_HITS_PER_REPORT}")
    elif not all(isinstance(key, str) and is_key(key) for key in hits) or len(set(hits)) != len(hits):
        problems.append("hit_keys holds a key twice or a name that is no key")
    return problems


def _iso(unix: float | None) -> str | None:
    return None if unix is None else dt.datetime.fromtimestamp(unix, dt.timezone.utc).isoformat()


class RunReceiver:
    """An ASGI app: the run routes here, everything else to ``app`` (404 without one)."""

    def __init__(self, app: ASGIApp | None = None, *, older: bool = False) -> None:
        self.app = app
        self.older = older  # refuses a miss's source, as a server from before the field does
        self.refused: list[tuple[Any, list[str]]] = []
        self._reports: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    # -- what it took -------------------------------------------------------------------------------------

    def runs(self) -> list[str]:
        """The run ids reported, in the order of their first report."""
        with self._lock:
            return list(dict.fromkeys(str(body["run_id"]) for body in self._reports))

    def reports_of(self, run_id: str) -> list[dict[str, Any]]:
        """Every report of ``run_id``, in order."""
        with self._lock:
            return [body for body in self._reports if body["run_id"] == run_id]

    def misses_of(self, run_id: str) -> list[dict[str, Any]]:
        """Every miss the run reported, in order (each once)."""
        return [miss for body in self.reports_of(run_id) for miss in body["new_misses"]]

    def run(self, run_id: str) -> dict[str, Any]:
        """The run as the server would list it: its last report's numbers."""
        last = self.reports_of(run_id)[-1]
        looked = last["hits"] + last["misses"]
        row = {k: v for k, v in last.items() if k != "new_misses"}
        row.update(
            started_at=_iso(last["started_at"]),
            ended_at=_iso(last["ended_at"]),
            updated_at=_iso(last["ended_at"] or last["started_at"]),
            hit_rate=last["hits"] / looked if looked else None,
            **_WORKED_OUT,
        )
        return row

    # -- ASGI ---------------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope.get("path", ""), scope.get("method", "")
        if scope["type"] == "http" and path == "/v1/runs" and method == "POST":
            await self._answer(send, *self._take(await _body(receive)))
        elif scope["type"] == "http" and path.startswith("/admin/runs") and method == "GET":
            query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode()).items()}
            await self._answer(send, *self._admin(path, query))
        elif self.app is not None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await self._answer(send, 404, {"error": "not_found", "detail": path})
        elif scope["type"] == "lifespan":  # alone, it has nothing to start or stop
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})

    def _take(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        problems = report_problems(body, older=self.older)
        if problems:
            self.refused.append((body, problems))
            return 400, {"error": "run_report_invalid", "detail": "; ".join(problems)}
        # The fields a report may leave out, as the server defaults them
        body = {
            "process_index": 0,
            "ended_at": None,
            **dict.fromkeys(_COUNTS, 0),
            **dict.fromkeys(_DURATIONS, 0.0),
            **body,
            "new_misses": [
                {"module": None, "components": None, "compile_seconds": None, "load_failed": False, **miss}
                for miss in body.get("new_misses", [])
            ],
        }
        with self._lock:
            self._reports.append(body)
        return 200, self.run(body["run_id"])

    def _admin(self, path: str, query: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        if path in ("/admin/runs", "/admin/runs/"):
            rows = [self.run(run_id) for run_id in reversed(self.runs())]
            for name in ("namespace", "framework", "host"):
                if name in query:
                    rows = [row for row in rows if row[name] == query[name]]
            if "since" in query:
                rows = [row for row in rows if row["started_at"] >= query["since"]]
            return 200, {"runs": rows[: int(query.get("limit", 100))]}
        run_id = path.removeprefix("/admin/runs/")
        if run_id not in self.runs():
            return 404, {"error": "run_not_found", "detail": f"no run {run_id!r}"}
        misses = [
            {**miss, "reason": "unknown", "detail": "this test receiver explains nothing"}
            for miss in self.misses_of(run_id)
        ]
        return 200, {**self.run(run_id), "misses": misses, "misses_total": len(misses)}

    @staticmethod
    async def _answer(send: Send, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


async def no_run_routes(scope: Scope, receive: Receive, send: Send) -> None:
    """A server that predates run reports: every route answers 404."""
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})
    elif scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


@contextmanager
def receiving_server(tmp_path: Path, **settings: Any) -> Iterator[tuple[str, RunReceiver]]:
    """A real server app over a fresh embedded index in ``tmp_path/data`` (migrated), wrapped by a
    :class:`RunReceiver`, served over HTTP on a loopback port; yields its URL and the receiver."""
    from cache_server.app import create_app
    from cache_server.index.migrate import upgrade
    from cache_server.settings import Settings
    from tests.support.threaded_server import serve_in_thread

    config = Settings(data_dir=tmp_path / "data", access_flush_seconds=0.2, **settings)
    upgrade(config)
    receiver = RunReceiver(create_app(config))
    with serve_in_thread(receiver) as url:
        yield url, receiver
