"""The background uploader: complete new entries only, missing first, digests, compile times, fail open.

Against the real server app in process (``real_server``); a fake server only where it must fail on demand.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from contextlib import closing
from pathlib import Path

import pytest

from cache_protocol import BUNDLE_COMPILE_TIME_PAX, BUNDLE_SHA256_PAX
from tests.support.api import sha
from tests.support.client_kit import (
    UPLOAD_NAMESPACE,
    FakeTorchXla,
    RealServer,
    make_uploader,
    tar_members,
    warnings_of,
)
from tests.support.fake_server import FakeCacheServer
from tests.support.wait import wait_until
from xla_cache.frameworks import torch_xla as torch_xla_adapter
from xla_cache.frameworks.torch_xla import TorchXla, deserialize_failure_cause, match_compile_times
from xla_cache.http.api import CacheApi
from xla_cache.localcache.cachedir import ListingWatch, LocalFile, scan
from xla_cache.transfer import uploader as uploader_module
from xla_cache.transfer.uploader import Uploader

NS = UPLOAD_NAMESPACE


def age(path: Path, seconds: float = 5.0) -> None:
    """Make a file look written ``seconds`` ago."""
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def test_flush_uploads_new_entries_with_digest_after_asking_missing(
    real_server: RealServer, tmp_path: Path
) -> None:
    data = {"1": os.urandom(1000), "2": os.urandom(2000)}
    for key, value in data.items():
        (tmp_path / key).write_bytes(value)
    real_server.put(NS, "2", data["2"])  # the server already has this one
    report = make_uploader(real_server.api(), tmp_path).flush()
    assert (report.uploaded, report.already_present, report.pending) == (1, 1, 0)
    assert real_server.entry(NS, "1") == data["1"]
    methods = [(r.method, r.path.rsplit("/", 1)[-1]) for r in real_server.requests]
    assert methods == [("POST", "missing"), ("POST", "entries")]  # one bulk upload of what is missing
    assert real_server.requests[1].headers["content-encoding"] == "zstd"
    members = tar_members(real_server.requests[1].body)
    assert [(m.name, m.pax_headers[BUNDLE_SHA256_PAX]) for m in members] == [("1", sha(data["1"]))]


def test_known_entries_are_not_sent_again(real_server: RealServer, tmp_path: Path) -> None:
    (tmp_path / "1").write_bytes(b"downloaded")
    known = scan(tmp_path)
    report = make_uploader(real_server.api(), tmp_path, known=known).flush()
    assert report.uploaded == 0 and real_server.requests == []


def test_a_file_still_open_for_writing_is_not_sent(real_server: RealServer, tmp_path: Path) -> None:
    uploader = make_uploader(real_server.api(), tmp_path)
    with open(tmp_path / "7", "wb") as handle:
        handle.write(b"half of an executable")
        handle.flush()
        age(tmp_path / "7")
        assert uploader.flush().uploaded == 0
        assert uploader.flush().pending == 1
        handle.write(b" and the rest")
    report = uploader.flush()
    assert report.uploaded == 1 and report.pending == 0
    assert real_server.entry(NS, "7") == b"half of an executable and the rest"


def test_background_pass_waits_until_the_size_is_stable(real_server: RealServer, tmp_path: Path) -> None:
    uploader = make_uploader(real_server.api(), tmp_path, settle=0.5)
    path = tmp_path / "5"
    path.write_bytes(b"a" * 100)
    uploader._pass(final=False, deadline=uploader_module.Deadline(2), wait=True)  # first sighting
    assert real_server.requests == []
    path.write_bytes(b"a" * 200)  # it grew: not stable
    age(path)
    uploader._pass(final=False, deadline=uploader_module.Deadline(2), wait=True)
    assert real_server.requests == []
    uploader._pass(final=False, deadline=uploader_module.Deadline(2), wait=True)  # unchanged and settled
    assert real_server.entry(NS, "5") == b"a" * 200


def test_the_background_thread_uploads_without_a_flush(real_server: RealServer, tmp_path: Path) -> None:
    uploader = make_uploader(real_server.api(), tmp_path)
    uploader.start()
    try:
        (tmp_path / "11").write_bytes(b"compiled")
        wait_until(
            lambda: real_server.has(NS, "11"),
            timeout=20,
            interval=0.02,
            message="entry 11 was never uploaded",
        )
    finally:
        uploader.stop()


def test_compile_time_is_sent_when_torch_xla_recorded_it(
    real_server: RealServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "3").write_bytes(b"x" * 10)
    written = (tmp_path / "3").stat().st_mtime_ns / 1e9
    monkeypatch.setattr(
        torch_xla_adapter,
        "_compile_time_samples",
        lambda: [(written - 30, 5.0), (written + 0.004, 1234.4)],
    )
    assert make_uploader(real_server.api(), tmp_path, framework=TorchXla()).flush().uploaded == 1
    (bulk,) = [r for r in real_server.requests if r.path.endswith("/entries")]
    assert bulk.path == f"/v1/namespaces/{NS}/entries"
    (member,) = tar_members(bulk.body)
    assert (member.name, member.pax_headers[BUNDLE_COMPILE_TIME_PAX]) == ("3", "1234")
    assert real_server.http.get(f"/v1/namespaces/{NS}").json()["uploads"] == 1


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
    with closing(CacheApi(url)) as api, caplog.at_level(logging.INFO, logger="xla_cache"):
        uploader = make_uploader(api, tmp_path)
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
    with FakeCacheServer() as server, closing(CacheApi(server.url)) as api:
        server.fail_status = 503
        uploader = make_uploader(api, tmp_path, server_failed=True)
        with caplog.at_level(logging.INFO, logger="xla_cache"):
            uploader.flush()
            uploader.flush(at_exit=True)
        assert warnings_of(caplog) == []
        server.fail_status = None
        assert uploader.flush().uploaded == 1  # the server came back


def test_deserialize_failures_give_one_warning_naming_the_cause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch_xla = FakeTorchXla()
    torch_xla.version = "2.8.0"
    uploader = Uploader(None, NS, tmp_path, framework=torch_xla)
    with caplog.at_level(logging.INFO, logger="xla_cache"):
        uploader.check_load_failures()
        assert warnings_of(caplog) == []
        torch_xla.failures = 3
        uploader.check_load_failures()
        torch_xla.failures = 9
        uploader.flush()
    warnings = warnings_of(caplog)
    assert len(warnings) == 1
    assert "3 entries" in warnings[0] and "#9094" in warnings[0] and "2.8.0" in warnings[0]


def test_deserialize_cause_by_version() -> None:
    assert "#8930" in deserialize_failure_cause("2.9.0")
    assert "corrupt" in deserialize_failure_cause("2.7.0") and "doctor" in deserialize_failure_cause("2.7.0")


def test_spmd_switched_after_warm_stops_uploads(
    real_server: RealServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch_xla = FakeTorchXla()
    torch_xla.spmd = True  # switched on after a warm without SPMD
    (tmp_path / "1").write_bytes(b"x")
    with caplog.at_level(logging.INFO, logger="xla_cache"):
        report = make_uploader(real_server.api(), tmp_path, framework=torch_xla).flush()
    assert report.uploaded == 0 and real_server.requests == []
    assert "use_spmd() before xla_cache.warm()" in warnings_of(caplog)[0]


def test_a_pass_with_nothing_new_looks_at_the_directory_once(
    real_server: RealServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warmed job's directory holds thousands of entries and the uploader looks every 2 s beside the job's
    loop: a pass that finds nothing to send stats each file once, not once more to count what is pending
    (issue 45: the stat of 2,000 files is most of what the client costs a warmed job's loop)."""
    for key in ("1", "2", "3"):
        (tmp_path / key).write_bytes(b"downloaded " + key.encode())
    known = scan(tmp_path)
    (tmp_path / "4").write_bytes(b"being written")  # seen, not yet settled: pending
    uploader = make_uploader(real_server.api(), tmp_path, known=known)
    scans: list[Path] = []
    counted = uploader_module.scan

    def counting(directory: Path, *args: object, **kwargs: object) -> dict[str, LocalFile]:
        scans.append(directory)
        return counted(directory, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(uploader_module, "scan", counting)
    uploader._pass(final=False, deadline=uploader_module.Deadline(2), wait=True)
    assert len(scans) == 1
    assert uploader.report().pending == 1 and real_server.requests == []


def _counting_scans(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directories the uploader scans from now on, one item per scan."""
    scans: list[Path] = []
    counted = uploader_module.scan

    def counting(directory: Path, *args: object, **kwargs: object) -> dict[str, LocalFile]:
        scans.append(directory)
        return counted(directory, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(uploader_module, "scan", counting)
    return scans


def background_pass(uploader: Uploader) -> None:
    uploader._pass(final=False, deadline=uploader_module.Deadline(2), wait=True)


def test_an_idle_pass_skips_the_scan_while_the_directory_is_unchanged(
    real_server: RealServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45: a warmed job's directory holds thousands of entries, and the uploader looks every 2 s (every
    0.25 s while following). Once a scan left nothing waiting, the passes skip it until a file appears."""
    for key in ("1", "2", "3"):
        (tmp_path / key).write_bytes(b"downloaded " + key.encode())
    age(tmp_path, 30)  # the warm filled it a while ago
    uploader = make_uploader(real_server.api(), tmp_path, known=scan(tmp_path))
    scans = _counting_scans(monkeypatch)
    for _ in range(3):
        background_pass(uploader)
    assert len(scans) == 1 and real_server.requests == []
    (tmp_path / "4").write_bytes(b"compiled after the scan")  # the directory's time moves: scanned again
    for _ in range(3):
        background_pass(uploader)  # sighted, unchanged and settled: sent
    assert real_server.entry(NS, "4") == b"compiled after the scan"


def test_a_scan_too_close_to_the_directory_change_is_not_trusted(
    real_server: RealServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file created in the same clock tick as the directory's last change, after the scan listed it,
    would leave the directory's time as the scan saw it: while that time is within a second of a scan's
    start, every pass scans."""
    (tmp_path / "1").write_bytes(b"downloaded")  # the directory changed just now
    uploader = make_uploader(real_server.api(), tmp_path, known=scan(tmp_path))
    scans = _counting_scans(monkeypatch)
    background_pass(uploader)
    background_pass(uploader)
    assert len(scans) == 2
    age(tmp_path, 30)
    background_pass(uploader)  # this one's start is well after the directory's time: trusted
    background_pass(uploader)
    assert len(scans) == 3


def test_a_file_still_being_written_is_looked_at_again(
    real_server: RealServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file seen while open for writing keeps the passes scanning (its writes do not move the directory's
    time) until it is complete and sent."""
    uploader = make_uploader(real_server.api(), tmp_path)
    scans = _counting_scans(monkeypatch)
    with open(tmp_path / "8", "wb") as handle:
        handle.write(b"half")
        handle.flush()
        age(tmp_path, 30)  # created long enough ago that a quiet scan would be trusted
        background_pass(uploader)
        background_pass(uploader)
        assert len(scans) == 2 and real_server.requests == []
        handle.write(b" and the rest")
    age(tmp_path / "8")
    background_pass(uploader)  # first sighting of the complete file
    background_pass(uploader)  # unchanged: sent
    assert real_server.entry(NS, "8") == b"half and the rest"
    age(tmp_path, 30)  # the upload's lock file moved the directory's time; a while later
    background_pass(uploader)  # nothing waits any more
    scanned = len(scans)
    background_pass(uploader)
    assert len(scans) == scanned


def test_an_entry_written_again_after_a_load_failure_is_uploaded(
    real_server: RealServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch_xla writes an entry it failed to load again under the same name, in place: the directory's
    time does not move, the framework's load failures do."""
    torch_xla = FakeTorchXla()
    (tmp_path / "9").write_bytes(b"damaged")
    age(tmp_path / "9")
    age(tmp_path, 30)
    uploader = make_uploader(real_server.api(), tmp_path, known=scan(tmp_path), framework=torch_xla)
    scans = _counting_scans(monkeypatch)
    background_pass(uploader)
    background_pass(uploader)
    assert len(scans) == 1
    stat = tmp_path.stat()
    (tmp_path / "9").write_bytes(b"compiled again")
    os.utime(tmp_path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as if the write left it alone
    torch_xla.failures += 1
    background_pass(uploader)
    background_pass(uploader)
    assert real_server.entry(NS, "9") == b"compiled again"


def test_a_full_scan_runs_at_least_every_minute(
    real_server: RealServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the directory's times say (a clock that went back, a file system that stamps oddly)."""
    (tmp_path / "1").write_bytes(b"downloaded")
    age(tmp_path, 30)
    uploader = make_uploader(real_server.api(), tmp_path, known=scan(tmp_path))
    now = [1000.0]
    uploader._listing = ListingWatch(tmp_path, clock=lambda: now[0])
    scans = _counting_scans(monkeypatch)
    background_pass(uploader)
    now[0] += 59.0
    background_pass(uploader)
    assert len(scans) == 1
    now[0] += 1.0
    background_pass(uploader)
    assert len(scans) == 2
