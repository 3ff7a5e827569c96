"""Single requests (GET, HEAD, conditional GET) and large entries against a static file server."""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from bench.core import MB, CaseResult, Context, case
from bench.launch import peak_rss_bytes, reset_peak_rss, run_server, run_static_server, wait_quiet
from cache_protocol import SHA256_HEADER

RATE_FLOOR = 1000.0  # requests per second, each kind
LARGE_SHARE = 0.70  # server throughput >= 70% of the static server's
RSS_LIMIT = 200 * MB
COLD_PAUSE = 1.2  # seconds: longer than the server's memory copies last (XLA_CACHE_HOT_CACHE_SECONDS)
MIB = 1024 * 1024


@case(
    "get-single",
    "one sequential keep-alive client (a raw socket; httpx too): GET, HEAD and GET 304 of small entries",
    prepare=Context.start_server,
)
def get_single(ctx: Context, result: CaseResult) -> None:
    data = ctx.dataset()
    keys = data.keys[:50]
    requests = ctx.pick(200, 2000)
    result.notes.append(
        f"{len(keys)} entries of {data.total_bytes / len(data.keys) / 1000:.0f} kB on average, read over and "
        "over: after its first read each is answered from the server process's memory (service/hot.py)"
    )
    ctx.ensure_pushed(data)
    # A push leaves the server parsing its entries' graphs for seconds (a child process at nice +10, which
    # still takes one of the 2 cores): time the reads once it is done.
    wait_quiet(ctx.server().pid)
    base = f"/v1/namespaces/{data.namespace}/entries"
    kinds = (("GET", "GET", False, 200), ("HEAD", "HEAD", False, 200), ("GET 304", "GET", True, 304))
    httpx_ms: dict[str, float] = {}
    with httpx.Client(base_url=ctx.server().url) as http:
        etags = {key: http.head(f"{base}/{key}").headers["etag"] for key in keys}

        def loop(method: str, conditional: bool, expect: int) -> None:
            for i in range(requests):
                key = keys[i % len(keys)]
                headers = {"If-None-Match": etags[key]} if conditional else None
                response = http.request(method, f"{base}/{key}", headers=headers)
                if response.status_code != expect:
                    raise RuntimeError(f"{method} {key}: {response.status_code}, expected {expect}")

        loop("GET", False, 200)  # warm-up: connection, first-request paths, page cache
        for label, method, conditional, expect in kinds:

            def run(method: str = method, conditional: bool = conditional, expect: int = expect) -> None:
                loop(method, conditional, expect)

            series = result.add(ctx.repeat(f"{label}, httpx client", run, work={"requests": requests}))
            httpx_ms[label] = 1000 / series.rates()["requests/s"]
            result.figures[f"{label} ms/request, httpx"] = httpx_ms[label]
    # The server's own rate: a raw keep-alive socket client that costs a few microseconds a request.
    raw = RawGetter(ctx.server().url)
    try:

        def raw_loop(method: str, conditional: bool, expect: int) -> None:
            for i in range(requests):
                key = keys[i % len(keys)]
                headers = {"If-None-Match": etags[key]} if conditional else None
                raw.request(method, f"{base}/{key}", headers=headers, status=expect)

        raw_loop("GET", False, 200)
        # Each entry read once, its memory copy long expired (XLA_CACHE_HOT_CACHE_SECONDS, 1 s): every request
        # hops to a worker thread, looks the row up and reads the blob.
        cold_keys = data.keys[:requests]
        for label, method in (("GET, each entry once", "GET"), ("HEAD, each entry once", "HEAD")):

            def cold_run(method: str = method) -> None:
                for key in cold_keys:
                    raw.request(method, f"{base}/{key}")

            series = result.add(
                ctx.repeat(
                    label, cold_run, setup=lambda: time.sleep(COLD_PAUSE), work={"requests": len(cold_keys)}
                )
            )
            result.figures[f"{label}: ms/request"] = 1000 / series.rates()["requests/s"]
        for label, method, conditional, expect in kinds:

            def raw_run(method: str = method, conditional: bool = conditional, expect: int = expect) -> None:
                raw_loop(method, conditional, expect)

            series = result.add(ctx.repeat(label, raw_run, work={"requests": requests}))
            rate = series.rates()["requests/s"]
            result.figures[f"{label} ms/request"] = 1000 / rate
            result.target(
                f"{label} >= {RATE_FLOOR:,.0f} requests/s",
                rate,
                RATE_FLOOR,
                at_most=False,
                fmt="{:,.0f}/s",
                why=(
                    f"{1000 / rate:.2f} ms per request from a raw keep-alive socket client "
                    f"({httpx_ms[label]:.2f} ms from httpx); client and server on the same 2 cores"
                ),
            )
    finally:
        raw.close()
    # Both clients against the minimal static server: what the client and loopback cost alone.
    static_root = ctx.tmpdir("single-static")
    for key in keys:
        os.link(data.directory / key, static_root / key)
    with run_static_server(static_root, ctx.scratch) as static, httpx.Client(base_url=static.url) as http:

        def static_loop() -> None:
            for i in range(requests):
                http.get(f"/{keys[i % len(keys)]}").raise_for_status()

        static_loop()
        series = result.add(
            ctx.repeat("GET, sendfile static server, httpx client", static_loop, work={"requests": requests})
        )
        result.figures["static GET ms/request, httpx"] = 1000 / series.rates()["requests/s"]
        static_raw = RawGetter(static.url)
        try:

            def static_raw_loop() -> None:
                for i in range(requests):
                    static_raw.request("GET", f"/{keys[i % len(keys)]}")

            static_raw_loop()
            series = result.add(
                ctx.repeat(
                    "GET, sendfile static server (floor)", static_raw_loop, work={"requests": requests}
                )
            )
            result.figures["static GET ms/request"] = 1000 / series.rates()["requests/s"]
        finally:
            static_raw.close()


def _sha256_rate() -> float:
    """MB/s of hashlib's SHA-256 on one core (the server checks every byte it serves against the digest)."""
    block = os.urandom(64 * MIB)
    started = time.perf_counter()
    hashlib.sha256(block).hexdigest()
    return len(block) / MB / (time.perf_counter() - started)


def _large_file(path: Path, size: int) -> str:
    """Write ``size`` bytes (a random MiB repeated: incompressible, cheap to make); its SHA-256."""
    block = os.urandom(MIB)
    digest = hashlib.sha256()
    with open(path, "wb") as handle:
        left = size
        while left:
            piece = block[: min(MIB, left)]
            handle.write(piece)
            digest.update(piece)
            left -= len(piece)
    return digest.hexdigest()


def _file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while chunk := handle.read(MIB):
            yield chunk


class RawGetter:
    """GET over one kept-alive socket, reading the body into one reused 4 MiB buffer and throwing it away.

    httpx tops out near 250 MB/s on this machine and would hide both servers behind the client; this reads
    at several GB/s, so the figure is the server's.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.sock: socket.socket | None = None
        self.buffer = bytearray(4 * MIB)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def get(self, path: str, size: int) -> None:
        self.request("GET", path, size=size)

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        status: int = 200,
        size: int | None = None,
    ) -> None:
        """One request; raises unless the answer has ``status`` (and a body of ``size`` bytes, if given)."""
        if self.sock is None:
            self.sock = socket.create_connection((self.host, self.port), timeout=300)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = self.sock
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{extra}\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError(f"{method} {path}: connection closed in the headers")
            head += chunk
        head, body = head.split(b"\r\n\r\n", 1)
        status_line = head.split(b"\r\n", 1)[0]
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            -1,
        )
        code = int(status_line.split(b" ", 2)[1])
        has_body = method != "HEAD" and code not in (204, 304)
        if code != status or (size is not None and length != size):
            raise RuntimeError(f"{method} {path}: {status_line!r}, Content-Length {length}, expected {size}")
        left = (max(length, 0) - len(body)) if has_body else 0
        view = memoryview(self.buffer)
        while left > 0:
            got = sock.recv_into(view[: min(left, len(view))])
            if not got:
                raise RuntimeError(f"{method} {path}: connection closed with {left} bytes to go")
            left -= got


def _start_large_server(ctx: Context) -> None:
    ctx.start("large-server", lambda: run_server(ctx.tmpdir("large-server")))


@case(
    "large-warm",
    "GET of one large entry: the server against a sendfile static server; server peak RSS",
    prepare=_start_large_server,
)
def large_warm(ctx: Context, result: CaseResult) -> None:
    size = ctx.pick(16, 256) * MIB
    static_root = ctx.tmpdir("static")
    path = static_root / "large.bin"
    digest = _large_file(path, size)
    result.notes.append(
        f"one entry of {size // MIB} MiB; one keep-alive socket client reads it into a reused buffer"
    )
    work = {"MB": size / MB}
    server = ctx.started("large-server", lambda: run_server(ctx.tmpdir("large-server")))
    with (
        run_static_server(static_root, ctx.scratch) as static,
        httpx.Client(timeout=300) as http,
    ):
        result.figures["server_rss_at_start_MB"] = (peak_rss_bytes(server.pid) or 0) / MB
        url = f"{server.url}/v1/namespaces/bench/entries/large"
        http.put(
            url,
            content=_file_chunks(path),
            headers={SHA256_HEADER: digest, "Content-Length": str(size)},
        ).raise_for_status()
        upload_peak = peak_rss_bytes(server.pid)
        result.figures["server_peak_rss_upload_MB"] = (upload_peak or 0) / MB
        reset = reset_peak_rss(server.pid)
        entry = "/v1/namespaces/bench/entries/large"
        ours_client, static_client = RawGetter(server.url), RawGetter(static.url)
        try:
            started = time.perf_counter()
            ours_client.get(entry, size)  # warm-up of both: page cache, connections
            # The server hashes a large blob the first time it serves it, then trusts the unchanged file.
            result.figures["server first GET MB/s (hashed)"] = size / (time.perf_counter() - started) / MB
            static_client.get("/large.bin", size)
            ours = result.add(ctx.repeat("server GET", lambda: ours_client.get(entry, size), work=work))
            floor = result.add(
                ctx.repeat("static sendfile GET", lambda: static_client.get("/large.bin", size), work=work)
            )
        finally:
            ours_client.close()
            static_client.close()
        get_peak = peak_rss_bytes(server.pid)
    share = floor.median / ours.median
    result.figures["share_of_static"] = share
    result.figures["server_peak_rss_get_MB"] = (get_peak or 0) / MB if reset else None
    result.figures["sha256_MB_per_s"] = _sha256_rate()
    result.target(
        f"server GET >= {LARGE_SHARE:.0%} of the static server's throughput",
        share,
        LARGE_SHARE,
        at_most=False,
        fmt="{:.0%}",
        why=f"{ours.rates()['MB/s']:.0f} MB/s against {floor.rates()['MB/s']:.0f} MB/s",
    )
    peak = max(get_peak or 0, upload_peak or 0)  # the whole life of the process: start, upload, GETs
    result.figures["server_peak_rss_MB"] = peak / MB
    get_text = f"{(get_peak or 0) / MB:.0f} MB during the GETs alone" if reset else "GETs not separated"
    result.target(
        f"server peak RSS < {RSS_LIMIT / MB:.0f} MB",
        peak / MB if peak else None,
        RSS_LIMIT / MB,
        at_most=True,
        fmt="{:.0f} MB",
        why=(
            f"VmHWM over the process's life: start {result.figures['server_rss_at_start_MB']:.0f} MB, "
            f"after the {size // MIB} MiB upload {(upload_peak or 0) / MB:.0f} MB, {get_text}"
        ),
        not_measured="" if peak else "VmHWM could not be read",
    )
