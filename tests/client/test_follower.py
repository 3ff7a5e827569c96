"""Following: entries another job stores while this one runs arrive in its cache directory, verified, never
over a file of the job's own; a server that goes away costs one warning; stopping is bounded."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.client_kit import FakeTorchXla, RealServer, warnings_of
from tests.support.wait import wait_until
from xla_cache import warm
from xla_cache.http.api import CacheApi
from xla_cache.runs import process as process_module
from xla_cache.transfer.follower import Follower

TIMEOUT = 10.0


def test_a_following_job_receives_what_another_job_stores(
    fake_torch_xla: FakeTorchXla,
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
) -> None:
    real_server.put(namespace, "100", b"before the warm")
    report = warm(real_server.url, tmp_path, fingerprint=fingerprint, timeout=TIMEOUT, follow=True)
    assert report.following and report.downloaded_entries == 1
    directory = tmp_path / namespace
    mine = b"compiled by this job"
    (directory / "300").write_bytes(mine)  # this job compiled 300 itself meanwhile

    others = {"200": os.urandom(700), "201": os.urandom(900), "300": b"another job's 300"}
    for key, data in others.items():
        real_server.put(namespace, key, data)  # another job uploads
    wait_until(lambda: (directory / "201").exists() and (directory / "200").exists(), timeout=15)
    assert (directory / "200").read_bytes() == others["200"]
    assert (directory / "201").read_bytes() == others["201"]
    assert (directory / "300").read_bytes() == mine  # never over the job's own file
    assert not [p for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]
    follower = process_module.PROCESS.follower
    assert follower is not None
    wait_until(lambda: follower.report().delivered == 2, timeout=5)
    real_server.put(namespace, "202", b"one more")  # its answer repeats the entries just before it
    wait_until(lambda: (directory / "202").exists(), timeout=15)
    report = follower.report()
    # Each counted once, though every answer repeats them: 100 came with the warm, 300 is the job's own.
    assert (report.delivered, report.already_here) == (3, 2)
    # The server counted them as delivered live.
    real_server.http.app.state.services.access.flush()  # type: ignore[attr-defined]
    totals = real_server.http.get("/admin/stats").json()["totals"]
    assert totals["live_deliveries"] == 3

    started = time.monotonic()
    process_module.stop(flush=False)
    assert time.monotonic() - started < 8  # one long poll at most
    assert process_module.PROCESS.follower is None


def test_this_jobs_new_compilation_goes_up_within_a_second_while_following(
    fake_torch_xla: FakeTorchXla,
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
) -> None:
    warm(real_server.url, tmp_path, fingerprint=fingerprint, timeout=TIMEOUT, follow=True)
    (tmp_path / namespace / "555").write_bytes(b"fresh executable")
    written = time.monotonic()
    wait_until(lambda: real_server.has(namespace, "555"), timeout=10, interval=0.05)
    assert time.monotonic() - written < 3


def test_a_follower_whose_server_is_gone_warns_once_and_stops_in_bounds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="xla_cache")
    api = CacheApi("http://127.0.0.1:9", None)  # nothing listens there
    follower = Follower(api, "ns", tmp_path, 0, wait=0.5)
    follower.start()
    wait_until(lambda: len(follower.report().errors) >= 3, timeout=15)
    started = time.monotonic()
    follower.stop()
    assert time.monotonic() - started < 3
    api.close()
    assert len([w for w in warnings_of(caplog) if "cannot follow" in w]) == 1
