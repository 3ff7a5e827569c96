"""The client against a real ``xla-cache-server`` process (no torch here: fingerprints are fixed).

These check that the client and the server agree on API v1: registration, manifest, bundle and GET
downloads, missing-then-upload, conflicts, auth, and the CLI's push and stats.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.support.client_kit import FACTS, warnings_of
from tests.support.server import LiveServer, run_server
from xla_cache import warm
from xla_cache.cli import main as cli_main
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.frameworks.torch_xla import FRAMEWORK as TORCH_XLA
from xla_cache.frameworks.torch_xla import build_fingerprint
from xla_cache.http.api import CacheApi
from xla_cache.http.deadline import Deadline
from xla_cache.localcache.cachedir import scan
from xla_cache.transfer import download, upload
from xla_cache.transfer.uploader import Uploader

TIMEOUT = 10.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with run_server(tmp_path_factory.mktemp("server")) as live:
        yield live


def fresh_fingerprint(tag: str) -> dict[str, Any]:
    """A fingerprint of its own per test, so tests sharing the server never share a namespace."""
    return build_fingerprint({**FACTS, "torch_git": tag}, env={})


def upload_all(url: str, namespace: str, directory: Path, token: str | None = None) -> Any:
    with closing(CacheApi(url, token)) as api:
        return Uploader(api, namespace, directory, framework=TORCH_XLA, settle=0.0).flush(timeout=TIMEOUT)


def make_entries(directory: Path, count: int, size: int, first: int = 0) -> dict[str, bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    entries = {str(3 * 10**37 + first + i): os.urandom(size + i) for i in range(count)}
    for key, data in entries.items():
        (directory / key).write_bytes(data)
    return entries


def test_upload_then_warm_round_trip_through_a_bundle(server: LiveServer, tmp_path: Path) -> None:
    fp = fresh_fingerprint("bundle")
    ns = namespace_id(fp)
    first = warm(server.url, tmp_path / "a", initialize=False, fingerprint=fp, timeout=TIMEOUT)
    assert first.errors == [] and first.manifest_entries == 0
    entries = make_entries(tmp_path / "a" / ns, 200, 2000)
    report = upload_all(server.url, ns, tmp_path / "a" / ns)
    assert (report.uploaded, report.pending, report.errors) == (200, 0, [])

    second = warm(server.url, tmp_path / "b", initialize=False, fingerprint=fp, timeout=TIMEOUT)
    assert second.errors == []
    assert (second.manifest_entries, second.downloaded_entries, second.present_entries) == (200, 200, 0)
    assert second.downloaded_bytes == sum(len(d) for d in entries.values())
    for key, data in entries.items():
        assert (tmp_path / "b" / ns / key).read_bytes() == data

    with closing(CacheApi(server.url)) as api:
        info = api.get_namespace(ns, Deadline(TIMEOUT))
    assert info["fingerprint"] == fp
    assert (info["entries"], info["bytes"]) == (200, second.downloaded_bytes)


def test_large_entries_by_get(server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download, "LARGE_ENTRY_BYTES", 100_000)
    fp = fresh_fingerprint("large")
    ns = namespace_id(fp)
    warm(server.url, tmp_path / "a", initialize=False, fingerprint=fp, timeout=TIMEOUT)
    entries = make_entries(tmp_path / "a" / ns, 3, 300_000)
    entries.update(make_entries(tmp_path / "a" / ns, 2, 10, first=100))
    assert upload_all(server.url, ns, tmp_path / "a" / ns).uploaded == 5
    report = warm(server.url, tmp_path / "b", initialize=False, fingerprint=fp, timeout=TIMEOUT)
    assert (report.downloaded_entries, report.errors) == (5, [])
    for key, data in entries.items():
        assert (tmp_path / "b" / ns / key).read_bytes() == data


def test_max_bytes_is_honoured_by_the_server(server: LiveServer, tmp_path: Path) -> None:
    fp = fresh_fingerprint("max-bytes")
    ns = namespace_id(fp)
    warm(server.url, tmp_path / "a", initialize=False, fingerprint=fp, timeout=TIMEOUT)
    make_entries(tmp_path / "a" / ns, 10, 1000)
    upload_all(server.url, ns, tmp_path / "a" / ns)
    report = warm(
        server.url, tmp_path / "b", initialize=False, fingerprint=fp, timeout=TIMEOUT, max_bytes=3100
    )
    assert 1 <= report.downloaded_entries <= 3
    assert report.downloaded_bytes <= 3100


def test_an_entry_with_another_digest_is_a_conflict_and_the_first_stays(
    server: LiveServer, tmp_path: Path
) -> None:
    fp = fresh_fingerprint("conflict")
    ns = namespace_id(fp)
    warm(server.url, tmp_path / "a", initialize=False, fingerprint=fp, timeout=TIMEOUT)
    (tmp_path / "a" / ns / "42").write_bytes(b"first compile")
    assert upload_all(server.url, ns, tmp_path / "a" / ns).uploaded == 1
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "42").write_bytes(b"a nondeterministic second compile")
    with closing(CacheApi(server.url)) as api:
        result = upload.upload_entries(api, ns, list(scan(tmp_path / "other").values()), Deadline(TIMEOUT))
        assert result.already_present == 1  # `missing` says the server has the key: nothing is sent
        local = scan(tmp_path / "other")["42"]
        status, _, _ = upload.upload_file(api, ns, local, Deadline(TIMEOUT))
    assert status == 409
    report = warm(server.url, tmp_path / "b", initialize=False, fingerprint=fp, timeout=TIMEOUT)
    assert report.downloaded_entries == 1
    assert (tmp_path / "b" / ns / "42").read_bytes() == b"first compile"


def test_cli_push_and_stats(server: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fp = fresh_fingerprint("cli")
    ns = namespace_id(fp)
    # A job that ran while the server was down left entries and its fingerprint file behind.
    warm(None, tmp_path, initialize=False, fingerprint=fp)
    entries = make_entries(tmp_path / ns, 4, 500)
    assert (
        cli_main(["push", "--server", server.url, "--cache-dir", str(tmp_path), "--json", "--no-progress"])
        == 0
    )
    pushed = json.loads(capsys.readouterr().out)
    assert pushed["namespaces"][0]["namespace"] == ns
    assert pushed["namespaces"][0]["uploaded"] == 4
    assert cli_main(["stats", "--server", server.url, "--namespace", ns, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["namespace"]["entries"] == 4
    assert stats["namespace"]["bytes"] == sum(len(d) for d in entries.values())
    assert stats["namespace"]["fingerprint"] == fp
    assert stats["admin"]["totals"]["entries"] >= 4  # /admin/stats answers on a loopback server without auth
    assert cli_main(["stats", "--server", server.url, "--namespace", ns]) == 0
    text = capsys.readouterr().out
    assert f"namespace  {ns}" in text and "stored       4 entries" in text
    # Pushing again sends nothing.
    assert (
        cli_main(["push", "--server", server.url, "--cache-dir", str(tmp_path), "--namespace", ns, "--json"])
        == 0
    )
    again = json.loads(capsys.readouterr().out)["namespaces"][0]
    assert (again["uploaded"], again["already_present"]) == (0, 4)


# -- auth -------------------------------------------------------------------------------------------------


def _token(data_dir: Path, role: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    env["XLA_CACHE_DATA_DIR"] = str(data_dir)
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("xla-cache-server")),
            "token",
            "create",
            "--name",
            role,
            "--role",
            role,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[0]


def test_auth_refusals_fail_open_with_a_warning_naming_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "server"
    data_dir.mkdir()
    read_token = _token(data_dir, "read")
    write_token = _token(data_dir, "write")
    fp = fresh_fingerprint("auth")
    ns = namespace_id(fp)
    with (
        run_server(data_dir, {"XLA_CACHE_AUTH": "true"}) as live,
        caplog.at_level(logging.INFO, logger="xla_cache"),
    ):
        report = warm(live.url, tmp_path / "none", initialize=False, fingerprint=fp, timeout=TIMEOUT)
        assert "401" in report.errors[0]
        assert len(warnings_of(caplog)) == 1 and "401" in warnings_of(caplog)[0]
        caplog.clear()

        report = warm(
            live.url, tmp_path / "w", token=write_token, initialize=False, fingerprint=fp, timeout=TIMEOUT
        )
        assert report.errors == []
        make_entries(tmp_path / "w" / ns, 2, 100)
        assert upload_all(live.url, ns, tmp_path / "w" / ns, token=write_token).uploaded == 2

        # A read token warms; registering needs write, so that is refused, named, and uploads are off.
        caplog.clear()
        report = warm(
            live.url, tmp_path / "r", token=read_token, initialize=False, fingerprint=fp, timeout=TIMEOUT
        )
        assert report.downloaded_entries == 2
        assert len(report.errors) == 1 and "403" in report.errors[0] and "uploads nothing" in report.errors[0]
        assert len(warnings_of(caplog)) == 1
