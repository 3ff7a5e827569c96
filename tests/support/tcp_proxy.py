"""A TCP forwarder for tests, to make a service look down without touching the service itself.

The machine's PostgreSQL (and an emulator) are shared with other tests, so an outage is simulated
between the server under test and the service: the server is pointed at the proxy's port, and the test
cuts the proxy (:meth:`TcpProxy.refuse`: open connections are reset, new ones refused), makes it swallow
traffic (:meth:`TcpProxy.blackhole`: connections are accepted but nothing ever answers, like a host
that vanished from the network), freezes it (:meth:`TcpProxy.stall`: open connections stay open and
nothing more passes, like a database process that stopped), and restores it (:meth:`TcpProxy.forward`)
on the same port.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.server import free_port

__all__ = ["TcpProxy", "tcp_proxy"]

_BUFFER = 64 * 1024


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; the mode can be switched while it runs."""

    def __init__(self, target_host: str, target_port: int, port: int | None = None) -> None:
        self.target = (target_host, target_port)
        self.port = port or free_port()
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
            listener.listen(128)
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
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            self._track(upstream)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(_BUFFER):
                self._flowing.wait()  # a stall holds what arrived; forward() drops the connection
                if self.mode != "forward":
                    break
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
def tcp_proxy(target_host: str, target_port: int) -> Iterator[TcpProxy]:
    """A forwarding :class:`TcpProxy` on a free port, closed afterwards."""
    proxy = TcpProxy(target_host, target_port)
    proxy.forward()
    try:
        yield proxy
    finally:
        proxy.close()
