"""Against a real ``xla-cache-server serve`` process on a free port."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Barrier

import httpx
import pytest

from cache_protocol import SHA256_HEADER
from tests.support.api import sha
from tests.support.process_tree import peak_rss_mib
from tests.support.server import SERVER_BIN, LiveServer, run_server

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with run_server(
        tmp_path_factory.mktemp("serve"), {"XLA_CACHE_MAX_ENTRY_BYTES": str(3 * 1024 * MIB)}
    ) as srv:
        yield srv


def test_round_trip_and_statuses(server: LiveServer) -> None:
    url = f"{server.url}/v1/namespaces/proc/entries/1"
    assert httpx.put(url, content=b"abc", headers={SHA256_HEADER: sha(b"abc")}).status_code == 201
    assert httpx.put(url, content=b"abc", headers={SHA256_HEADER: sha(b"abc")}).status_code == 200
    assert httpx.put(url, content=b"abd", headers={SHA256_HEADER: sha(b"abd")}).status_code == 409
    assert httpx.get(url).content == b"abc"


def test_32_clients_upload_one_new_key_at_once(server: LiveServer) -> None:
    data = os.urandom(256 * 1024)
    url = f"{server.url}/v1/namespaces/race/entries/777"
    barrier = Barrier(32)

    def upload(_: int) -> int:
        with httpx.Client(timeout=60) as client:
            barrier.wait()
            return client.put(url, content=data, headers={SHA256_HEADER: sha(data)}).status_code

    with ThreadPoolExecutor(32) as pool:
        statuses = list(pool.map(upload, range(32)))
    assert statuses.count(201) == 1
    assert set(statuses) == {200, 201}
    ns = httpx.get(f"{server.url}/v1/namespaces/race").json()
    assert (ns["entries"], ns["bytes"], ns["uploads"]) == (1, len(data), 1)
    data_dir = server.log_path.parent
    assert [p.name for p in (data_dir / "blobs" / "race").iterdir()] == ["777"]
    assert list((data_dir / "blobs" / ".tmp").iterdir()) == []
    assert httpx.get(url).content == data


def raw_request(server: LiveServer, request: bytes, body_chunks: Iterable[bytes] = ()) -> tuple[bytes, int]:
    """Send a raw HTTP/1.1 request; return the response head and how many body bytes were accepted."""
    host, port = server.url.removeprefix("http://").split(":")
    sent = 0
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        try:
            for chunk in body_chunks:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = b""
        try:
            while b"\r\n\r\n" not in response:
                piece = sock.recv(65536)
                if not piece:
                    break
                response += piece
        except ConnectionResetError:
            pass
    return response, sent


def test_dot_dot_in_raw_path_is_400(server: LiveServer) -> None:
    head, _ = raw_request(
        server,
        b"GET /v1/namespaces/proc/entries/.. HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    assert head.startswith(b"HTTP/1.1 400"), head


def test_chunked_upload_over_limit_is_cut_off_early(tmp_path: Path) -> None:
    """Without Content-Length the server stops reading once the body passes the limit."""
    with run_server(tmp_path, {"XLA_CACHE_MAX_ENTRY_BYTES": str(4 * MIB)}) as srv:
        request = (
            b"PUT /v1/namespaces/big/entries/1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            + SHA256_HEADER.encode()
            + b": "
            + b"0" * 64
            + b"\r\nConnection: close\r\n\r\n"
        )
        chunks = (b"z" * MIB for _ in range(1024))  # 1 GiB offered
        head, sent = raw_request(srv, request, chunks)
        assert head.startswith(b"HTTP/1.1 413"), head
        assert sent < 512 * MIB, f"the client had to send {sent} bytes before being refused"
        assert not (tmp_path / "blobs" / "big").exists()
        assert list((tmp_path / "blobs" / ".tmp").iterdir()) == []


def test_declared_upload_over_limit_is_refused_before_the_body(tmp_path: Path) -> None:
    with run_server(tmp_path, {"XLA_CACHE_MAX_ENTRY_BYTES": str(MIB)}) as srv:
        response = httpx.put(
            f"{srv.url}/v1/namespaces/big/entries/1",
            content=b"x" * (2 * MIB),
            headers={SHA256_HEADER: "0" * 64},
        )
        assert response.status_code == 413
        assert str(MIB) in response.json()["detail"]


def test_corrupt_blob_breaks_the_download(server: LiveServer) -> None:
    data = os.urandom(3 * MIB)
    url = f"{server.url}/v1/namespaces/corrupt/entries/5"
    assert httpx.put(url, content=data, headers={SHA256_HEADER: sha(data)}).status_code == 201
    blob = server.log_path.parent / "blobs" / "corrupt" / "5"
    raw = bytearray(blob.read_bytes())
    raw[-10] ^= 0xFF
    blob.write_bytes(bytes(raw))
    # The last chunk is held back until the digest is checked, so the transfer ends short.
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(url)
    assert "corrupt blob corrupt/5" in server.log()


def test_a_damaged_large_blob_breaks_its_download_with_one_log_line(tmp_path: Path) -> None:
    """Issue 42, item 9 (part): one GET of a large entry whose blob was damaged after its upload broke off
    (right) and logged two lines and two tracebacks of the same error (the app's "unhandled error" and
    uvicorn's "Exception in ASGI application"). One line now names the entry; the entry is dropped."""
    with run_server(tmp_path / "data", {}) as server:
        data = os.urandom(8 * MIB)
        url = f"{server.url}/v1/namespaces/damaged/entries/big"
        assert httpx.put(url, content=data, headers={SHA256_HEADER: sha(data)}).status_code == 201
        blob = server.log_path.parent / "blobs" / "damaged" / "big"
        raw = bytearray(blob.read_bytes())
        raw[len(raw) // 2] ^= 0xFF  # a byte in the middle: the first half streams before it is found
        blob.write_bytes(bytes(raw))
        with httpx.Client(timeout=60) as client:
            with pytest.raises(httpx.RemoteProtocolError), client.stream("GET", url) as response:
                assert response.status_code == 200
                for _ in response.iter_bytes():
                    pass
            assert client.get(url).status_code == 404  # dropped: its next upload stores it again
        log = server.log()
    named = [line for line in log.splitlines() if "damaged/big" in line and not line.startswith("{")]
    assert len(named) == 1, log
    assert "ERROR" in named[0] and "do not match the index" in named[0], named
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log


@pytest.mark.slow
def test_2_gib_entry_streams_both_ways_with_memory_flat(server: LiveServer) -> None:
    size = 2 * 1024 * MIB
    block = os.urandom(MIB)

    def body() -> Iterator[bytes]:
        for i in range(size // MIB):
            yield i.to_bytes(8, "little") + block[8:]

    digest = hashlib.sha256()
    for chunk in body():
        digest.update(chunk)
    expected = digest.hexdigest()
    before = peak_rss_mib(server.pid)
    url = f"{server.url}/v1/namespaces/huge/entries/2gib"
    with httpx.Client(timeout=300) as client:
        response = client.put(
            url, content=body(), headers={SHA256_HEADER: expected, "Content-Length": str(size)}
        )
        assert response.status_code == 201, response.text
        back = hashlib.sha256()
        received = 0
        with client.stream("GET", url) as stream:
            assert stream.headers["content-length"] == str(size)
            for chunk in stream.iter_bytes(MIB):
                back.update(chunk)
                received += len(chunk)
    assert received == size
    assert back.hexdigest() == expected
    growth = peak_rss_mib(server.pid) - before
    print(f"server peak RSS growth for a 2 GiB upload and download: {growth:.1f} MiB")
    assert growth < 64, f"the server's peak memory grew by {growth:.0f} MiB"
    (server.log_path.parent / "blobs" / "huge" / "2gib").unlink()


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::", " "], ids=["any-v4", "empty", "any-v6", "blank"])
def test_serve_refuses_public_address_without_auth(tmp_path: Path, host: str) -> None:
    """Every way of saying "all interfaces" is refused with auth off (uvicorn reads "" as all of them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    env["XLA_CACHE_DATA_DIR"] = str(tmp_path)
    result = subprocess.run(
        [str(SERVER_BIN), "serve", "--host", host, "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--insecure" in result.stderr and "XLA_CACHE_AUTH" in result.stderr


def test_invalid_setting_is_a_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    env.update({"XLA_CACHE_DATA_DIR": str(tmp_path), "XLA_CACHE_MAX_ENTRY_BYTES": "lots"})
    result = subprocess.run(
        [sys.executable, "-m", "cache_server.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "max_entry_bytes" in result.stderr


def test_without_the_server_extra_the_command_says_what_to_install(tmp_path: Path) -> None:
    """A training host with only the client installed gets a sentence, not a traceback."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('fastapi', 'sqlalchemy', 'pydantic_settings'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _Hide())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    env["PYTHONPATH"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "cache_server", "serve"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "with its server extra" in result.stderr and "[server]" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_says_where_the_dashboard_is_and_keeps_alembic_quiet(tmp_path: Path, workers: int) -> None:
    """Once it listens, serve logs one line with the dashboard's address (the host and port as served);
    the migrations it runs first log nothing at the info level (alembic's lines are for debugging)."""
    with run_server(tmp_path / "data", workers=workers) as srv:
        log = srv.log()
    lines = log.splitlines()
    dashboard = [line for line in lines if "dashboard: " in line]
    assert len(dashboard) == 1, log
    assert dashboard[0].endswith(f"INFO cache_server.cli: dashboard: {srv.url}/"), log
    assert not [line for line in lines if "alembic" in line], log


def test_the_dashboard_line_names_every_interface_in_words() -> None:
    from cache_server.cli.serve import dashboard_line

    assert dashboard_line("127.0.0.1", 8080) == "dashboard: http://127.0.0.1:8080/"
    assert dashboard_line("::1", 8080) == "dashboard: http://[::1]:8080/"
    line = dashboard_line("0.0.0.0", 80)
    assert line.startswith("dashboard: http://0.0.0.0:80/ (listening on every interface: ")
