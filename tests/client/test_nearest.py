"""A warm that finds its namespace empty or thin names the nearest populated namespace and how it differs
(against the real server app); asking never costs the warm anything when it fails."""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.client_kit import FACTS, RealServer
from tests.support.fake_server import FakeCacheServer
from tests.support.http_stub import Recorded, Reply
from xla_cache import warm
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.frameworks.torch_xla import build_fingerprint
from xla_cache.transfer.nearest import ASK_SECONDS, NearDifference, NearNamespace, nearest_line

TIMEOUT = 5.0
FAST = "--xla_cpu_enable_fast_math=true"


def _seed(server: RealServer, fingerprint: dict[str, Any], count: int) -> str:
    namespace = namespace_id(fingerprint)
    assert server.http.put(f"/v1/namespaces/{namespace}", json={"fingerprint": fingerprint}).is_success
    for i in range(count):
        server.put(namespace, str(10**20 + i), b"x" * (100 + i))
    return namespace


def test_an_empty_namespace_names_the_flag_that_set_it_apart(
    real_server: RealServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    theirs = _seed(real_server, build_fingerprint(FACTS, env={}), 12)
    ours = build_fingerprint(FACTS, env={"XLA_FLAGS": FAST})
    with caplog.at_level(logging.INFO, logger="xla_cache"):
        report = warm(real_server.url, tmp_path, initialize=False, fingerprint=ours, timeout=TIMEOUT)
    assert report.manifest_entries == 0 and report.errors == []
    [near] = report.nearest
    assert (near.namespace, near.entries) == (theirs, 12)
    assert near.differences == [
        NearDifference("XLA_FLAGS", FAST, None, "--xla_cpu_enable_fast_math=true (theirs: unset)")
    ]
    first, second = report.summary().splitlines()
    assert first.startswith("xla-cache warm: torch_xla namespace ")
    prefix, digest = theirs.rsplit("-", 1)
    assert second.startswith(f"namespace new (0 entries); nearest: {prefix}-{digest[:8]}… (12 entries, used ")
    assert second.endswith(" ago) differs in XLA_FLAGS: --xla_cpu_enable_fast_math=true (theirs: unset)")
    assert json.loads(json.dumps(report.as_dict()))["nearest"][0]["differences"][0]["ours"] == FAST
    logged = [r.getMessage() for r in caplog.records if r.name == "xla_cache"]
    assert len(logged) == 1 and second in logged[0]


def test_a_populated_namespace_reports_no_nearest_but_a_thin_one_does(
    real_server: RealServer, tmp_path: Path
) -> None:
    plain = build_fingerprint(FACTS, env={})
    _seed(real_server, plain, 12)
    report = warm(real_server.url, tmp_path, initialize=False, fingerprint=plain, timeout=TIMEOUT)
    assert report.manifest_entries == 12 and report.nearest == []
    assert len(report.summary().splitlines()) == 1
    thin = build_fingerprint(FACTS, env={"XLA_FLAGS": FAST})
    _seed(real_server, thin, 1)  # 1 < 10 % of 12
    report = warm(real_server.url, tmp_path, initialize=False, fingerprint=thin, timeout=TIMEOUT)
    assert report.manifest_entries == 1 and [n.entries for n in report.nearest] == [12]
    assert report.summary().splitlines()[1].startswith("namespace thin (1 entry); nearest: ")


def test_trouble_asking_is_ignored(fake_server: FakeCacheServer, tmp_path: Path) -> None:
    # the fake server knows no nearest route (an older server): the warm reports no error and no nearest
    fp = build_fingerprint(FACTS, env={"XLA_FLAGS": FAST})
    report = warm(fake_server.url, tmp_path, initialize=False, fingerprint=fp, timeout=TIMEOUT)
    assert report.errors == [] and report.nearest == []


class SlowNearest(FakeCacheServer):
    """An older fake server whose nearest route takes its time (ten seconds, or until released)."""

    def __init__(self) -> None:
        super().__init__()
        self.released = threading.Event()

    def answer(self, request: Recorded) -> Reply:
        if request.path.endswith("/nearest"):
            self.released.wait(10)
        return super().answer(request)


def test_a_slow_answer_costs_the_warm_at_most_its_short_bound(tmp_path: Path) -> None:
    fp = build_fingerprint(FACTS, env={"XLA_FLAGS": FAST})
    with SlowNearest() as server:
        try:
            started = time.monotonic()
            report = warm(server.url, tmp_path, initialize=False, fingerprint=fp, timeout=30.0)
            took = time.monotonic() - started
        finally:
            server.released.set()
    assert report.errors == [] and report.nearest == []
    assert ASK_SECONDS <= took < ASK_SECONDS + 3.0  # not the warm's 30 s


def test_the_line_reads_ages_counts_and_several_fields() -> None:
    now = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)
    near = NearNamespace(
        "cpu-tx2.7.0-0123456789abcdef0123456789abcdef",
        2001,
        (now - dt.timedelta(hours=2)).isoformat(),
        [
            NearDifference("XLA_FLAGS", "--xla_a=1", None, "--xla_a=1 (theirs: unset)"),
            NearDifference("XLA_FLAGS", None, "--xla_b", "unset (theirs: --xla_b)"),
            NearDifference("torch_xla_git", "abc", "def", "abc (theirs: def)"),
        ],
    )
    assert nearest_line(0, [near], now) == (
        "namespace new (0 entries); nearest: cpu-tx2.7.0-01234567… (2,001 entries, used 2 h ago) differs in "
        "XLA_FLAGS: --xla_a=1 (theirs: unset), unset (theirs: --xla_b); torch_xla_git: abc (theirs: def)"
    )
    assert nearest_line(3, [], now) == ""


def test_cli_warm_prints_why(
    real_server: RealServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from xla_cache import cli
    from xla_cache.http import api

    _seed(real_server, build_fingerprint(FACTS, env={}), 12)
    ours = _seed(real_server, build_fingerprint(FACTS, env={"XLA_FLAGS": FAST}), 0)
    monkeypatch.setattr(api, "CacheApi", real_server.api)  # what the command builds when it runs
    args = ["warm", "--namespace", ours, "--server", real_server.url, "--cache-dir", str(tmp_path)]
    assert cli.main(args) == 0
    why = [line for line in capsys.readouterr().out.splitlines() if line.startswith("why ")]
    assert len(why) == 1 and why[0].endswith(
        "differs in XLA_FLAGS: --xla_cpu_enable_fast_math=true (theirs: unset)"
    )
    assert cli.main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nearest"][0]["entries"] == 12


def test_doctor_names_the_nearest_namespace_of_its_runtime(
    real_server: RealServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from xla_cache import cli
    from xla_cache.cli import doctor

    _seed(real_server, build_fingerprint(FACTS, env={}), 12)
    ours = build_fingerprint(FACTS, env={"XLA_FLAGS": FAST})
    run = {
        "torch_xla_version": "2.7.0",
        "graphs": 1,
        "entries": ["1"],
        "counters": {"PersistentCacheHit": 1, "UncachedCompile": 0},
        "outputs": [[1.0]],
        "namespace": namespace_id(ours),
        "fingerprint": ours,
    }
    monkeypatch.setattr(doctor, "CacheApi", real_server.api)
    report = doctor.run_doctor(server=real_server.url, runner=lambda directory, timeout: run)
    assert report.server_ready is True and report.namespace_entries == 0
    assert [d.text for d in report.nearest[0].differences] == [f"{FAST} (theirs: unset)"]

    monkeypatch.setattr(doctor, "run_doctor", lambda **_: report)
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "namespace entries  namespace new (0 entries); nearest: " in out
    assert f"differs in XLA_FLAGS: {FAST} (theirs: unset)" in out


def test_an_empty_namespace_names_the_torch_xla_setting_that_set_it_apart(
    real_server: RealServer, tmp_path: Path
) -> None:
    theirs = _seed(real_server, build_fingerprint(FACTS, env={}), 3)
    ours = build_fingerprint(FACTS, env={"XLA_HLO_DEBUG": "1"})
    report = warm(real_server.url, tmp_path, initialize=False, fingerprint=ours, timeout=TIMEOUT)
    [near] = report.nearest
    assert near.namespace == theirs
    assert near.differences == [NearDifference("XLA_HLO_DEBUG", "1", None, "1 (theirs: unset)")]
    assert report.summary().splitlines()[1].endswith(" ago) differs in XLA_HLO_DEBUG: 1 (theirs: unset)")


def test_escape_sequences_another_client_registered_never_reach_the_jobs_log(
    real_server: RealServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The third probe: a write token registers a fingerprint whose flag holds ESC and U+009B (the 8-bit CSI);
    a job whose nearest namespace it is logs the difference with those characters written out."""
    hostile = "true\x1b[2J\x9b31mPWNED"
    theirs = build_fingerprint(FACTS, env={"XLA_FLAGS": FAST})
    theirs["xla_flags"]["--xla_cpu_enable_fast_math"] = hostile
    _seed(real_server, theirs, 12)
    ours = build_fingerprint(FACTS, env={})
    with caplog.at_level(logging.INFO, logger="xla_cache"):
        report = warm(real_server.url, tmp_path, initialize=False, fingerprint=ours)
    assert report.nearest[0].differences[0].theirs.endswith(hostile)  # as sent, for a program to read
    [logged] = [r.getMessage() for r in caplog.records if r.name == "xla_cache"]
    assert "\\u001b[2J\\u009b31mPWNED" in logged
    assert not any(char in logged for char in "\x1b\x9b")
    assert len(logged.splitlines()) == 2  # the summary's own lines stay lines
