"""warm() against the real server app (in process): what lands in the directory, what is reported; and
failing open, against a fake server that hangs, fails or sends corrupt bytes."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cache_protocol import FINGERPRINT_FILE
from tests.support.client_kit import FakeTorchXla, RealServer, tar_members, warnings_of
from tests.support.fake_server import FakeCacheServer
from xla_cache import CacheAlreadyInitialized, warm
from xla_cache.localcache.cachedir import read_fingerprint
from xla_cache.localcache.dirlock import DirLock
from xla_cache.runs import process as process_module

TIMEOUT = 2.0
SLACK = 1.5  # thread start-up and teardown on a loaded 2-core machine; far below any real timeout


def seed(
    server: RealServer | FakeCacheServer, namespace: str, count: int, size: int = 3000
) -> dict[str, bytes]:
    entries = {str(10**20 + i): os.urandom(size + i) for i in range(count)}
    for key, data in entries.items():
        server.put(namespace, key, data)
    return entries


def test_warm_downloads_every_entry_verified(
    real_server: RealServer, fingerprint: dict[str, Any], namespace: str, tmp_path: Path
) -> None:
    entries = seed(real_server, namespace, 30)
    report = warm(real_server.url, tmp_path, initialize=False, fingerprint=fingerprint, timeout=TIMEOUT)
    directory = tmp_path / namespace
    assert report.namespace == namespace
    assert report.cache_dir == str(directory)
    assert report.errors == []
    assert report.downloaded_entries == 30
    assert report.downloaded_bytes == sum(len(d) for d in entries.values())
    assert report.present_entries == 0
    for key, data in entries.items():
        assert (directory / key).read_bytes() == data
    assert sorted(os.listdir(directory)) == sorted([*entries, FINGERPRINT_FILE, ".xla-cache.lock"])
    assert read_fingerprint(directory) == fingerprint
    assert real_server.namespace(namespace)["fingerprint"] == fingerprint  # registered with the server
    assert real_server.paths("POST").count(f"/v1/namespaces/{namespace}/bundle") == 1  # one stream


def test_second_warm_skips_what_is_present_and_replaces_what_is_wrong(
    real_server: RealServer, fingerprint: dict[str, Any], namespace: str, tmp_path: Path
) -> None:
    entries = seed(real_server, namespace, 5)
    warm(real_server.url, tmp_path, initialize=False, fingerprint=fingerprint, timeout=TIMEOUT)
    directory = tmp_path / namespace
    damaged = sorted(entries)[0]
    data = entries[damaged]
    (directory / damaged).write_bytes(bytes([data[0] ^ 1]) + data[1:])  # same size, wrong digest
    report = warm(real_server.url, tmp_path, initialize=False, fingerprint=fingerprint, timeout=TIMEOUT)
    assert (report.present_entries, report.downloaded_entries) == (4, 1)
    assert (directory / damaged).read_bytes() == data


def test_max_bytes_limits_the_manifest(
    real_server: RealServer, fingerprint: dict[str, Any], namespace: str, tmp_path: Path
) -> None:
    seed(real_server, namespace, 10, size=1000)
    report = warm(
        real_server.url, tmp_path, initialize=False, fingerprint=fingerprint, timeout=TIMEOUT, max_bytes=3500
    )
    manifest = next(r for r in real_server.requests if r.path.endswith("/manifest"))
    assert manifest.query["max_bytes"] == "3500"
    assert report.downloaded_entries == 3


@pytest.mark.parametrize(("workers", "bundles"), [(1, 1), (2, 2), (8, 4)])
def test_a_warm_streams_at_most_as_many_bundles_as_the_server_has_workers(
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
    bundles: int,
) -> None:
    """Several streams into a one-process server only take turns on its CPU (2,000 small entries: 0.33 s as
    one bundle, 0.50 s as four); a server with more processes gets more, up to the client's four."""
    from xla_cache.transfer import download as download_module

    monkeypatch.setattr(download_module, "BUNDLE_MIN_ENTRIES", 5)
    monkeypatch.setattr(real_server.http.app.state.settings, "workers", workers)
    manifest = real_server.http.get(f"/v1/namespaces/{namespace}/manifest").json()
    assert manifest["bundle_streams"] == workers
    entries = seed(real_server, namespace, 40, size=500)
    report = warm(real_server.url, tmp_path, initialize=False, fingerprint=fingerprint, timeout=TIMEOUT)
    assert report.downloaded_entries == 40 and report.errors == []
    assert real_server.paths("POST").count(f"/v1/namespaces/{namespace}/bundle") == bundles
    for key, data in entries.items():
        assert (tmp_path / namespace / key).read_bytes() == data


def test_large_entries_come_by_parallel_gets(
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from xla_cache.transfer import download as download_module

    monkeypatch.setattr(download_module, "LARGE_ENTRY_BYTES", 5000)
    small = seed(real_server, namespace, 3, size=100)
    big = {"77": os.urandom(6000), "78": os.urandom(7000)}
    for key, data in big.items():
        real_server.put(namespace, key, data)
    report = warm(real_server.url, tmp_path, initialize=False, fingerprint=fingerprint, timeout=TIMEOUT)
    assert report.downloaded_entries == 5 and report.errors == []
    gets = [p for p in real_server.paths("GET") if "/entries/" in p]
    assert sorted(p.rsplit("/", 1)[1] for p in gets) == ["77", "78"]
    for key, data in {**small, **big}.items():
        assert (tmp_path / namespace / key).read_bytes() == data


def test_token_is_sent(real_server: RealServer, fingerprint: dict[str, Any], tmp_path: Path) -> None:
    warm(
        real_server.url, tmp_path, token="s3cret", initialize=False, fingerprint=fingerprint, timeout=TIMEOUT
    )
    assert {r.headers.get("authorization") for r in real_server.requests} == {"Bearer s3cret"}


def test_a_server_given_as_host_and_port_is_named_as_the_url_the_requests_went_to(
    real_server: RealServer, fingerprint: dict[str, Any], namespace: str, tmp_path: Path
) -> None:
    """``host:port/`` (as XLA_CACHE_SERVER often is) is normalised once: the report names that URL."""
    entries = seed(real_server, namespace, 2)
    bare = " " + real_server.url.removeprefix("http://") + "/"
    report = warm(bare, tmp_path, initialize=False, fingerprint=fingerprint, timeout=TIMEOUT)
    assert (report.server, report.errors, report.downloaded_entries) == (real_server.url, [], len(entries))
    assert real_server.paths()[0] == f"/v1/namespaces/{namespace}"


def test_settings_come_from_the_environment(
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed(real_server, namespace, 2)
    monkeypatch.setenv("XLA_CACHE_SERVER", real_server.url)
    monkeypatch.setenv("XLA_CACHE_TOKEN", "from-env")
    monkeypatch.setenv("XLA_CACHE_DIR", str(tmp_path / "env-dir"))
    report = warm(initialize=False, fingerprint=fingerprint, timeout=TIMEOUT)
    assert report.cache_dir == str(tmp_path / "env-dir" / namespace)
    assert report.downloaded_entries == 2
    assert real_server.requests[0].headers["authorization"] == "Bearer from-env"


def test_warm_logs_one_line_with_the_report(
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed(real_server, namespace, 3)
    with caplog.at_level(logging.INFO, logger="xla_cache"):
        warm(real_server.url, tmp_path, initialize=False, fingerprint=fingerprint, timeout=TIMEOUT)
    lines = [r.getMessage() for r in caplog.records if r.name == "xla_cache"]
    assert len(lines) == 1
    assert namespace in lines[0] and "3 entries" in lines[0] and "downloaded" in lines[0]


# -- fail open ------------------------------------------------------------------------------------------


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _warm_and_time(server_url: str, fingerprint: dict[str, Any], directory: Path) -> tuple[Any, float]:
    started = time.monotonic()
    report = warm(server_url, directory, initialize=False, fingerprint=fingerprint, timeout=TIMEOUT)
    return report, time.monotonic() - started


@pytest.mark.parametrize(
    "failure", ["down", "hang", "5xx", "corrupt bundle", "garbage bundle", "corrupt get"]
)
def test_warm_fails_open_within_the_timeout_with_one_warning(
    failure: str,
    fake_server: FakeCacheServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed(fake_server, namespace, 4)
    url = fake_server.url
    expected = {
        "down": "cannot connect",
        "hang": "did not",
        "5xx": "HTTP 503 storage_unavailable",
        "corrupt bundle": "SHA-256",
        "garbage bundle": "not a valid tar stream",
        "corrupt get": "SHA-256",
    }[failure]
    if failure == "down":
        url = _closed_port_url()
    elif failure == "hang":
        fake_server.hang = True
    elif failure == "5xx":
        fake_server.fail_status = 503
    elif failure == "corrupt bundle":
        fake_server.corrupt_bundle = True
    elif failure == "garbage bundle":
        fake_server.garbage_bundle = True
    else:
        from xla_cache.transfer import download as download_module

        fake_server.corrupt_bundle = True  # the fake also corrupts single GETs
        monkeypatch.setattr(download_module, "LARGE_ENTRY_BYTES", 1)
    with caplog.at_level(logging.INFO, logger="xla_cache"):
        report, seconds = _warm_and_time(url, fingerprint, tmp_path)
    assert seconds < TIMEOUT + SLACK, f"{failure}: warm cost {seconds:.2f} s"
    warnings = warnings_of(caplog)
    assert len(warnings) == 1, warnings
    assert expected in warnings[0]
    assert "training continues" in warnings[0]
    assert report.errors and report.downloaded_entries == 0
    # Nothing unverified is left for torch_xla to read.
    assert [n for n in os.listdir(tmp_path / namespace) if not n.startswith(".")] == []
    assert [n for n in os.listdir(tmp_path / namespace) if n.endswith(".part")] == []


class _StallAfterFirstEntry:
    """A progress display whose first placed entry stalls its download thread past the warm's timeout."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self._stalled = False
        self._lock = threading.Lock()

    def start(self, label: str, entries: int, nbytes: int) -> None:
        pass

    def advance(self, entries: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            stall = entries and not self._stalled
            self._stalled = self._stalled or bool(entries)
        if stall:
            self.release.wait(30)

    def close(self) -> None:
        pass


def test_a_warm_cut_short_reports_every_entry_it_placed(
    real_server: RealServer, fingerprint: dict[str, Any], namespace: str, tmp_path: Path
) -> None:
    entries = seed(real_server, namespace, 40)
    progress = _StallAfterFirstEntry()
    try:
        report = warm(
            real_server.url,
            tmp_path,
            initialize=False,
            fingerprint=fingerprint,
            timeout=TIMEOUT,
            progress=progress,
        )
        time.sleep(0.3)  # anything placed after warm() returned would show up now
        placed = [key for key in entries if (tmp_path / namespace / key).exists()]
    finally:
        progress.release.set()
    assert any("within the 2 s timeout" in error for error in report.errors)
    assert 1 <= len(placed) < len(entries)
    assert report.downloaded_entries == len(placed)
    assert report.downloaded_bytes == sum(len(entries[key]) for key in placed)


def test_a_slow_server_costs_at_most_the_timeout(
    fake_server: FakeCacheServer,
    fingerprint: dict[str, Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The hang case above, measured: the job pays the timeout, not the server's delay."""
    fake_server.hang = True
    report, seconds = _warm_and_time(fake_server.url, fingerprint, tmp_path)
    assert TIMEOUT - 0.5 <= seconds < TIMEOUT + SLACK
    assert "did not" in report.errors[0]


def test_a_second_process_warming_the_same_directory_waits_for_the_lock(
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed(real_server, namespace, 2)
    (tmp_path / namespace).mkdir(parents=True)
    holder = DirLock(tmp_path / namespace)
    assert holder.acquire(1)
    try:
        report, seconds = _warm_and_time(real_server.url, fingerprint, tmp_path)
    finally:
        holder.release()
    assert seconds < TIMEOUT + SLACK
    assert "another process" in report.errors[0] and report.downloaded_entries == 0
    assert real_server.requests == []  # it never touched the server while the other one warmed
    report = warm(real_server.url, tmp_path, initialize=False, fingerprint=fingerprint, timeout=TIMEOUT)
    assert report.downloaded_entries == 2


def test_no_server_means_local_cache_only(
    fingerprint: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="xla_cache"):
        report = warm(None, tmp_path, initialize=False, fingerprint=fingerprint)
    assert report.server is None and report.errors == []
    assert warnings_of(caplog) == []


# -- torch_xla integration (faked here; real in tests/e2e) ---------------------------------------------


def test_too_late_is_a_clear_error_before_any_request(
    real_server: RealServer, fingerprint: dict[str, Any], tmp_path: Path, fake_torch_xla: FakeTorchXla
) -> None:
    fake_torch_xla.too_late = True
    with pytest.raises(CacheAlreadyInitialized, match="already compiled"):
        warm(real_server.url, tmp_path, fingerprint=fingerprint)
    assert real_server.requests == []


def test_warm_initializes_the_cache_and_starts_the_uploader(
    fake_torch_xla: FakeTorchXla,
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
) -> None:
    initialized = fake_torch_xla.initialized
    seed(real_server, namespace, 2)
    report = warm(real_server.url, tmp_path, fingerprint=fingerprint, timeout=TIMEOUT)
    assert initialized == [str(tmp_path / namespace)]
    assert report.initialized and report.uploading
    new = os.urandom(500)
    (tmp_path / namespace / "999").write_bytes(new)
    totals = process_module.flush(timeout=TIMEOUT)
    assert totals.uploaded == 1
    assert real_server.entry(namespace, "999") == new
    bulk = [r for r in real_server.requests if r.method == "POST" and r.path.endswith("/entries")]
    assert len(bulk) == 1 and len(tar_members(bulk[0].body)) == 1  # downloaded ones not sent back


def test_rank_threads_of_one_process_share_one_warm(
    fake_torch_xla: FakeTorchXla,
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
) -> None:
    """xmp.spawn on CPU/GPU runs one thread per device in one process: torch_xla has one cache there."""
    initialized = fake_torch_xla.initialized
    seed(real_server, namespace, 3)
    reports: list[Any] = []

    def rank() -> None:
        reports.append(warm(real_server.url, tmp_path, fingerprint=fingerprint, timeout=TIMEOUT))

    threads = [threading.Thread(target=rank) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert initialized == [str(tmp_path / namespace)]
    assert len(reports) == 4 and all(r is reports[0] for r in reports)
    assert reports[0].downloaded_entries == 3
    assert real_server.paths("POST").count(f"/v1/namespaces/{namespace}/bundle") == 1
