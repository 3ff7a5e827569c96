"""The latency proxy of :mod:`tests.support.tcp_proxy` (``delay`` seconds per connection and per request),
run in a process of its own, to stand in for the network between the server and Cloud Storage."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import multiprocessing.synchronize
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.sharedctypes import Synchronized

from tests.support.tcp_proxy import TcpProxy

__all__ = ["ProxyProcess", "latency_proxy_process"]


class ProxyProcess:
    """A latency :class:`TcpProxy` running in a process of its own: its port, and its request count."""

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
    proxy = TcpProxy(target_host, target_port, delay=delay, counter=counter)
    proxy.forward()
    ready.send(proxy.port)
    stop.wait()
    proxy.close()


@contextmanager
def latency_proxy_process(target_host: str, target_port: int, delay: float) -> Iterator[ProxyProcess]:
    """A latency :class:`TcpProxy` in a process of its own, stopped afterwards.

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
