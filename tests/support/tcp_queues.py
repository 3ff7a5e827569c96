"""Whether a server process has read what the test's sockets sent it, seen from outside that process: the
kernel's TCP queues of each connection (Linux, ``/proc/net/tcp``). A test waits on this instead of sleeping
"long enough" for a request to reach a server that runs in another process."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["read_by_server", "settled"]


def _queues() -> dict[tuple[int, int], tuple[int, int]]:
    """(local port, remote port) -> (send queue, receive queue) bytes of each established TCP connection."""
    found: dict[tuple[int, int], tuple[int, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] != "01":  # ESTABLISHED
                continue
            local, remote = (int(address.rsplit(":", 1)[1], 16) for address in fields[1:3])
            sent, received = (int(size, 16) for size in fields[4].split(":"))
            found[(local, remote)] = (sent, received)
    return found


def read_by_server(socks: Sequence[socket.socket]) -> bool:
    """Whether the server (on this machine) has read everything each of ``socks`` sent it: the client side's
    send queue and the server side's receive queue of every connection are empty."""
    queues = _queues()
    for sock in socks:
        mine, peer = sock.getsockname()[1], sock.getpeername()[1]
        client_side, server_side = queues.get((mine, peer)), queues.get((peer, mine))
        if client_side is None or server_side is None or client_side[0] or server_side[1]:
            return False
    return True


def _cpu_ticks(pid: int) -> int:
    """User plus system CPU time ``pid`` has used, in clock ticks (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def settled(pid: int, quiet: float = 0.2) -> Callable[[], bool]:
    """A condition for ``wait_until``: true once process ``pid`` has used no CPU for ``quiet`` seconds,
    that is it is done with what it was sent (a server that parsed its requests and parked their waits)."""
    last = [_cpu_ticks(pid), time.monotonic()]

    def condition() -> bool:
        ticks, now = _cpu_ticks(pid), time.monotonic()
        if ticks != last[0]:
            last[:] = [ticks, now]
            return False
        return now - last[1] >= quiet

    return condition
