"""A TCP forwarder that adds latency, to stand in for the network between the server and Cloud Storage.

Each new connection waits ``delay`` seconds before it is connected upstream (the TCP handshake's round
trip), and each request waits ``delay`` seconds before its first byte is forwarded: a request starts with
the first client bytes after the upstream answered (or on a new connection). So every HTTP request costs
one extra ``delay``, as one round trip to a bucket in another zone would; bytes within a request and
responses pass at once.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.synchronize
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.sharedctypes import Synchronized

__all__ = ["LatencyProxy", "ProxyProcess", "latency_proxy", "latency_proxy_process"]

_BUFFER = 256 * 1024


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class LatencyProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target`` with ``delay`` seconds added per connection and request."""

    def __init__(
        self, target_host: str, target_port: int, delay: float, counter: Synchronized[int] | None = None
    ) -> None:
        self.target = (target_host, target_port)
        self.delay = delay
        self.requests = 0
        self._counter = counter  # the requests, also counted here (readable from another process)
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._open: set[socket.socket] = set()
        self._accepter = threading.Thread(target=self._accept_loop, name="latency-proxy", daemon=True)
        self._accepter.start()

    def close(self) -> None:
        """Stop accepting and drop every connection."""
        self._stopping.set()
        self._accepter.join(timeout=5)
        self._listener.close()
        with self._lock:
            doomed, self._open = self._open, set()
        for sock in doomed:
            _close(sock)

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        client.settimeout(None)
        time.sleep(self.delay)  # the handshake's round trip
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            _close(client)
            return
        upstream.settimeout(None)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._open.update((client, upstream))
        new_request = threading.Event()
        new_request.set()
        threading.Thread(target=self._pump, args=(client, upstream, new_request, True), daemon=True).start()
        self._pump(upstream, client, new_request, False)

    def _pump(
        self, src: socket.socket, dst: socket.socket, new_request: threading.Event, is_request: bool
    ) -> None:
        try:
            while data := src.recv(_BUFFER):
                if is_request and new_request.is_set():
                    new_request.clear()
                    with self._lock:
                        self.requests += 1
                    if self._counter is not None:
                        with self._counter.get_lock():
                            self._counter.value += 1
                    time.sleep(self.delay)
                elif not is_request:
                    new_request.set()  # the upstream answered: the client's next bytes are a new request
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(src)
            _close(dst)
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)


@contextmanager
def latency_proxy(target_host: str, target_port: int, delay: float) -> Iterator[LatencyProxy]:
    """A :class:`LatencyProxy` on a free loopback port, closed afterwards."""
    proxy = LatencyProxy(target_host, target_port, delay)
    try:
        yield proxy
    finally:
        proxy.close()


class ProxyProcess:
    """A :class:`LatencyProxy` running in a process of its own: its port, and its request count."""

    def __init__(self, port: int, counter: Synchronized[int], pid: int) -> None:
        self.port = port
        self.pid = pid
        self._counter = counter

    @property
    def requests(self) -> int:
        return int(self._counter.value)


def _serve(
    target_host: str,
    target_port: int,
    delay: float,
    counter: Synchronized[int],
    ready: multiprocessing.connection.Connection,
    stop: multiprocessing.synchronize.Event,
) -> None:
    proxy = LatencyProxy(target_host, target_port, delay, counter)
    ready.send(proxy.port)
    stop.wait()
    proxy.close()


@contextmanager
def latency_proxy_process(target_host: str, target_port: int, delay: float) -> Iterator[ProxyProcess]:
    """A :class:`LatencyProxy` in a process of its own, stopped afterwards.

    The benchmark times a client in its own process; a proxy's forwarding threads there (two per connection,
    hundreds at once) would share that process's GIL and slow the client, which real Cloud Storage never
    does.
    """
    spawn = multiprocessing.get_context("spawn")
    counter: Synchronized[int] = spawn.Value("q", 0)
    receiving, sending = spawn.Pipe(duplex=False)
    stop = spawn.Event()
    process = spawn.Process(
        target=_serve,
        args=(target_host, target_port, delay, counter, sending, stop),
        name="latency-proxy",
        daemon=True,
    )
    process.start()
    try:
        if not receiving.poll(60):
            raise RuntimeError("the latency proxy process did not start")
        assert process.pid is not None
        yield ProxyProcess(int(receiving.recv()), counter, process.pid)
    finally:
        stop.set()
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
            process.join()
