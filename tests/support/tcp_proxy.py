"""A TCP forwarder for tests, to make a service look down without touching the service itself.

The machine's PostgreSQL (and an emulator) are shared with other tests, so an outage is simulated
between the server under test and the service: the server is pointed at the proxy's port, and the test
cuts the proxy (:meth:`TcpProxy.refuse`: open connections are reset, new ones refused), makes it swallow
traffic (:meth:`TcpProxy.blackhole`: connections are accepted but nothing ever answers, like a host
that vanished from the network), freezes it (:meth:`TcpProxy.stall`: open connections stay open and
nothing more passes, like a database process that stopped), and restores it (:meth:`TcpProxy.forward`)
on the same port.

With ``delay`` it also stands in for the network between the server and Cloud Storage (the benchmark and the
GCS concurrency test use it so): each new connection waits ``delay`` seconds before it is connected upstream
(the TCP handshake's round trip), and each request waits ``delay`` seconds before its first byte is
forwarded; a request starts with the first client bytes after the upstream answered (or on a new
connection). So every HTTP request costs one extra ``delay``; :attr:`TcpProxy.requests` counts them.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.sharedctypes import Synchronized

from tests.support.server import free_port

__all__ = ["TcpProxy", "tcp_proxy"]

_BUFFER = 256 * 1024


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; the mode can be switched while it runs."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        port: int | None = None,
        *,
        delay: float = 0.0,
        counter: Synchronized[int] | None = None,
    ) -> None:
        self.target = (target_host, target_port)
        self.port = port or free_port()
        self.delay = delay
        self.requests = 0
        self._counter = counter  # the requests, also counted here (readable from another process)
        self.mode = "forward"
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._accepter: threading.Thread | None = None
        self._open: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._flowing = threading.Event()
        self._flowing.set()

    # -- modes ------------------------------------------------------------------------------------------
    def forward(self) -> None:
        """Pass traffic through to the target (listening again if the proxy was refusing)."""
        self._drop_connections()
        self.mode = "forward"
        self._flowing.set()
        self._listen()

    def refuse(self) -> None:
        """Reset every open connection and refuse new ones (the service is down)."""
        self.mode = "refuse"
        self._stop_listening()
        self._drop_connections()

    def blackhole(self) -> None:
        """Reset open connections, then accept new ones but never answer (the host is unreachable)."""
        with self._lock:  # first: no connection accepted from now on is forwarded
            self.mode = "blackhole"
        self._drop_connections()  # then every one accepted before, forwarded or not
        self._listen()

    def stall(self) -> None:
        """Keep every connection open but pass nothing more either way (new ones are held too)."""
        with self._lock:
            self.mode = "stall"
            self._flowing.clear()

    def close(self) -> None:
        """Stop listening and drop everything."""
        self._stopping.set()
        self._flowing.set()
        self._stop_listening()
        self._drop_connections()

    # -- plumbing ---------------------------------------------------------------------------------------
    def _listen(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(256)
            listener.settimeout(0.05)
            self._listener = listener
            self._accepter = threading.Thread(target=self._accept_loop, args=(listener,), daemon=True)
            self._accepter.start()

    def _stop_listening(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            accepter, self._accepter = self._accepter, None
        if listener is not None:
            listener.close()
        if accepter is not None:
            accepter.join(timeout=5)

    def _drop_connections(self) -> None:
        with self._lock:
            doomed, self._open = self._open, set()
        for sock in doomed:
            # SO_LINGER 0: the peer sees a reset at once, as when a server process dies.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            _close(sock)

    def _track(self, *socks: socket.socket) -> None:
        with self._lock:
            self._open.update(socks)

    def _accept_loop(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            with self._lock:  # tracked and judged at once, so a switch of mode cannot fall in between
                self._open.add(client)
                forward = self.mode == "forward"
            if not forward:
                continue  # held open, never answered: a black hole
            if self.delay:  # the handshake's round trip, without holding up the next connection
                threading.Thread(target=self._connect, args=(client,), daemon=True).start()
            else:
                self._connect(client)

    def _connect(self, client: socket.socket) -> None:
        time.sleep(self.delay)
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _close(client)
            return
        upstream.settimeout(None)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._track(upstream)
        new_request = threading.Event()
        new_request.set()
        for src, dst, is_request in ((client, upstream, True), (upstream, client, False)):
            threading.Thread(target=self._pump, args=(src, dst, new_request, is_request), daemon=True).start()

    def _count_request(self) -> None:
        with self._lock:
            self.requests += 1
        if self._counter is not None:
            with self._counter.get_lock():
                self._counter.value += 1

    def _pump(
        self, src: socket.socket, dst: socket.socket, new_request: threading.Event, is_request: bool
    ) -> None:
        try:
            while data := src.recv(_BUFFER):
                self._flowing.wait()  # a stall holds what arrived; forward() drops the connection
                if self.mode != "forward":
                    break
                if is_request and new_request.is_set():
                    new_request.clear()
                    self._count_request()
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
def tcp_proxy(target_host: str, target_port: int, *, delay: float = 0.0) -> Iterator[TcpProxy]:
    """A forwarding :class:`TcpProxy` on a free port (``delay`` seconds away), closed afterwards."""
    proxy = TcpProxy(target_host, target_port, delay=delay)
    proxy.forward()
    try:
        yield proxy
    finally:
        proxy.close()
