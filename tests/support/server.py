"""Run a real ``xla-cache-server serve`` process on a free loopback port, for tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.wait import wait_until

__all__ = ["LiveServer", "free_port", "run_cli", "run_server", "server_cli", "stop_process"]

SERVER_BIN = Path(sys.executable).with_name("xla-cache-server")


def stop_process(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """Ask a process to stop (SIGTERM), and kill it if it has not within ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_cli(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``xla-cache-server ARGS`` to its end with the ``XLA_CACHE_*`` variables of ``env`` (none of
    the shell's), capturing its output."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    return subprocess.run(
        [str(SERVER_BIN), *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def server_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """:func:`run_cli` over the embedded index in ``data_dir``, with auth on."""
    return run_cli({"XLA_CACHE_DATA_DIR": str(data_dir), "XLA_CACHE_AUTH": "on"}, *args)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class _PortTaken(Exception):
    """The server could not bind its port."""


def _wait_ready(server: LiveServer, startup_timeout: float, ready_path: str = "/readyz") -> None:
    """Return once the server's ``ready_path`` answers 200 (and the server is still running)."""

    def ready() -> bool:
        if server.process.poll() is not None:
            if "address already in use" in server.log().lower():
                raise _PortTaken
            raise RuntimeError(f"xla-cache-server exited with {server.process.returncode}:\n{server.log()}")
        try:
            answered = httpx.get(f"{server.url}{ready_path}", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False
        return answered and server.process.poll() is None  # not another process answering on a taken port

    wait_until(
        ready,
        timeout=startup_timeout,
        interval=0.1,
        message=lambda: f"xla-cache-server did not become ready:\n{server.log()}",
    )


@contextmanager
def run_server(
    data_dir: Path,
    env: Mapping[str, str] | None = None,
    *,
    workers: int = 1,
    port: int | None = None,
    startup_timeout: float = 60.0,
    host: str = "127.0.0.1",
    extra_args: Sequence[str] = (),
    command: Callable[[int], Sequence[str]] | None = None,
    ready_path: str = "/readyz",
) -> Iterator[LiveServer]:
    """Start ``xla-cache-server serve``, wait until ``/readyz`` answers 200, stop it afterwards.

    ``host`` is where it listens (the tests reach it on 127.0.0.1 either way). ``command``, given a port,
    is a whole command line to run instead (``host``, ``workers`` and ``extra_args`` are then unused),
    ready once ``ready_path`` answers 200. The log is ``data_dir/server-<port>.log``.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    full_env.update({"XLA_CACHE_DATA_DIR": str(data_dir), "XLA_CACHE_ACCESS_FLUSH_SECONDS": "0.2"})
    full_env.update(env or {})
    # A port picked by free_port() can be taken by another process before the server binds it: then
    # pick another (only when the caller did not ask for a port).
    attempts = 1 if port else 3
    for attempt in range(attempts):
        chosen = port or free_port()
        log_path = data_dir / f"server-{chosen}.log"
        if command is None:
            argv = [str(SERVER_BIN), "serve", "--host", host, "--port", str(chosen)]
            argv += ["--workers", str(workers), *extra_args]
        else:
            argv = list(command(chosen))
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                argv,
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = LiveServer(url=f"http://127.0.0.1:{chosen}", process=process, log_path=log_path)
        try:
            _wait_ready(server, startup_timeout, ready_path)
        except _PortTaken:
            stop_process(process)
            if attempt == attempts - 1:
                raise RuntimeError(f"no free port for xla-cache-server:\n{server.log()}") from None
            continue
        except BaseException:
            stop_process(process)
            raise
        break
    try:
        yield server
    finally:
        stop_process(process)
