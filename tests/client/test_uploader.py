"""The background uploader: complete new entries only, missing first, digests, compile times, fail open."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from client import uploader as uploader_module
from client.api import CacheApi
from client.cachedir import LocalFile, scan
from client.uploader import Uploader, deserialize_failure_cause, match_compile_times
from tests.client.conftest import warnings_of
from tests.client.fakes import FakeCacheServer, sha

NS = "cpu-tx2.7.0-test"


def make_uploader(url: str, directory: Path, **kwargs: object) -> Uploader:
    options: dict[str, object] = {"interval": 0.05, "settle": 0.0, "timeout": 2.0, "spmd": False}
    options.update(kwargs)
    return Uploader(CacheApi(url), NS, directory, **options)  # type: ignore[arg-type]


def age(path: Path, seconds: float = 5.0) -> None:
    """Make a file look written ``seconds`` ago."""
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def wait_for(condition: Callable[[], bool], limit: float = 20.0) -> None:
    end = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < end, "condition never became true"
        time.sleep(0.02)


def test_flush_uploads_new_entries_with_digest_after_asking_missing(
    fake_server: FakeCacheServer, tmp_path: Path
) -> None:
    data = {"1": os.urandom(1000), "2": os.urandom(2000)}
    for key, value in data.items():
        (tmp_path / key).write_bytes(value)
    fake_server.put(NS, "2", data["2"])  # the server already has this one
    report = make_uploader(fake_server.url, tmp_path).flush()
    assert (report.uploaded, report.already_present, report.pending) == (1, 1, 0)
    assert fake_server.entries[NS]["1"] == data["1"]
    methods = [(r.method, r.path.rsplit("/", 1)[-1]) for r in fake_server.requests]
    assert methods == [("POST", "missing"), ("PUT", "1")]
    put = fake_server.requests[1]
    assert put.headers["x-content-sha256"] == sha(data["1"])


def test_known_entries_are_not_sent_again(fake_server: FakeCacheServer, tmp_path: Path) -> None:
    (tmp_path / "1").write_bytes(b"downloaded")
    known = scan(tmp_path)
    report = make_uploader(fake_server.url, tmp_path, known=known).flush()
    assert report.uploaded == 0 and fake_server.requests == []


def test_a_file_still_open_for_writing_is_not_sent(fake_server: FakeCacheServer, tmp_path: Path) -> None:
    uploader = make_uploader(fake_server.url, tmp_path)
    with open(tmp_path / "7", "wb") as handle:
        handle.write(b"half of an executable")
        handle.flush()
        age(tmp_path / "7")
        assert uploader.flush().uploaded == 0
        assert uploader.flush().pending == 1
        handle.write(b" and the rest")
    report = uploader.flush()
    assert report.uploaded == 1 and report.pending == 0
    assert fake_server.entries[NS]["7"] == b"half of an executable and the rest"


def test_background_pass_waits_until_the_size_is_stable(fake_server: FakeCacheServer, tmp_path: Path) -> None:
    uploader = make_uploader(fake_server.url, tmp_path, settle=0.5)
    path = tmp_path / "5"
    path.write_bytes(b"a" * 100)
    uploader._pass(final=False, deadline=uploader_module.Deadline(2), wait=True)  # first sighting
    assert fake_server.requests == []
    path.write_bytes(b"a" * 200)  # it grew: not stable
    age(path)
    uploader._pass(final=False, deadline=uploader_module.Deadline(2), wait=True)
    assert fake_server.requests == []
    uploader._pass(final=False, deadline=uploader_module.Deadline(2), wait=True)  # unchanged and settled
    assert fake_server.entries[NS]["5"] == b"a" * 200


def test_the_background_thread_uploads_without_a_flush(fake_server: FakeCacheServer, tmp_path: Path) -> None:
    uploader = make_uploader(fake_server.url, tmp_path)
    uploader.start()
    try:
        (tmp_path / "11").write_bytes(b"compiled")
        wait_for(lambda: "11" in fake_server.entries.get(NS, {}))
    finally:
        uploader.stop()


def test_compile_time_is_sent_when_torch_xla_recorded_it(
    fake_server: FakeCacheServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "3").write_bytes(b"x" * 10)
    written = (tmp_path / "3").stat().st_mtime_ns / 1e9
    monkeypatch.setattr(
        uploader_module, "compile_time_samples", lambda: [(written - 30, 5.0), (written + 0.004, 1234.4)]
    )
    make_uploader(fake_server.url, tmp_path).flush()
    assert fake_server.compile_times[(NS, "3")] == 1234


def test_match_compile_times() -> None:
    files = [LocalFile("a", Path("a"), 1, int(100.0e9)), LocalFile("b", Path("b"), 1, int(200.0e9))]
    samples = [(100.003, 50.0), (150.0, 70.0), (200.002, 90.0)]
    assert match_compile_times(files, samples) == {"a": 50, "b": 90}
    assert match_compile_times(files, [(150.0, 1.0)]) == {}  # no sample right after: unknown


def test_server_outage_warns_once_and_the_exit_flush_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    (tmp_path / "1").write_bytes(b"x")
    uploader = make_uploader(url, tmp_path)
    with caplog.at_level(logging.INFO, logger="xla_cache"):
        uploader.flush()
        uploader.flush()
        started = time.monotonic()
        report = uploader.flush(at_exit=True)
        exit_seconds = time.monotonic() - started
    warnings = warnings_of(caplog)
    assert len(warnings) == 1 and "cannot connect" in warnings[0]
    assert report.pending == 1
    assert exit_seconds < 1.0
    assert any("xla-cache push" in r.getMessage() for r in caplog.records)


def test_no_second_warning_when_the_warm_already_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "1").write_bytes(b"x")
    with FakeCacheServer() as server:
        server.fail_status = 503
        uploader = make_uploader(server.url, tmp_path, server_failed=True)
        with caplog.at_level(logging.INFO, logger="xla_cache"):
            uploader.flush()
            uploader.flush(at_exit=True)
        assert warnings_of(caplog) == []
        server.fail_status = None
        assert uploader.flush().uploaded == 1  # the server came back


def test_deserialize_failures_give_one_warning_naming_the_cause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = {"PersistentCacheDeserializeFailure": 0}
    monkeypatch.setattr(uploader_module, "counter", lambda name: counts.get(name, 0))
    monkeypatch.setattr(uploader_module, "loaded_torch_xla_version", lambda: "2.8.0")
    uploader = Uploader(None, NS, tmp_path)
    with caplog.at_level(logging.INFO, logger="xla_cache"):
        uploader.check_deserialize_failures()
        assert warnings_of(caplog) == []
        counts["PersistentCacheDeserializeFailure"] = 3
        uploader.check_deserialize_failures()
        counts["PersistentCacheDeserializeFailure"] = 9
        uploader.flush()
    warnings = warnings_of(caplog)
    assert len(warnings) == 1
    assert "3 entries" in warnings[0] and "#9094" in warnings[0] and "2.8.0" in warnings[0]


def test_deserialize_cause_by_version() -> None:
    assert "#8930" in deserialize_failure_cause("2.9.0")
    assert "corrupt" in deserialize_failure_cause("2.7.0") and "doctor" in deserialize_failure_cause("2.7.0")


def test_spmd_switched_after_warm_stops_uploads(
    fake_server: FakeCacheServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(uploader_module, "is_spmd_now", lambda: True)
    (tmp_path / "1").write_bytes(b"x")
    with caplog.at_level(logging.INFO, logger="xla_cache"):
        report = make_uploader(fake_server.url, tmp_path, spmd=False).flush()
    assert report.uploaded == 0 and fake_server.requests == []
    assert "use_spmd() before client.warm()" in warnings_of(caplog)[0]
