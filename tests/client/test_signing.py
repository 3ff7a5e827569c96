"""Jobs verify: with trusted keys (``XLA_CACHE_TRUSTED_KEYS``) a warm and the follower place only entries a
trusted key signed, whatever the server vouches for. The attacker here has write access to the blob store
and the index and replaces an entry's bytes and digest together, so the server serves them as valid."""

from __future__ import annotations

import datetime as dt
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from cache_protocol.signing import SIGNATURE_HEADER, Signer
from cache_server.index.models import Entry
from cache_server.storage.base import blob_name
from client import stop, warm
from client import warming as warm_module
from client.cachedir import scan
from client.deadline import Deadline
from client.transfer import upload_entries
from tests.support.api import put, sha
from tests.support.apps import services_of
from tests.support.client_kit import FakeTorchXla, RealServer, warnings_of
from tests.support.wait import wait_until

TIMEOUT = 10.0
TRUSTED = "XLA_CACHE_TRUSTED_KEYS"


@pytest.fixture(scope="module")
def alice() -> Signer:
    return Signer.generate()


@pytest.fixture(scope="module")
def bob() -> Signer:
    return Signer.generate()


def upload_signed(
    server: RealServer, namespace: str, signer: Signer, entries: dict[str, bytes], source: Path
) -> None:
    """Upload ``entries`` as a job holding ``signer`` would (a bulk upload, signed member by member)."""
    source.mkdir()
    for key, data in entries.items():
        (source / key).write_bytes(data)
    result = upload_entries(
        server.api(signer=signer), namespace, list(scan(source).values()), Deadline(TIMEOUT)
    )
    assert (result.stored, result.errors) == (len(entries), [])


def poison(server: RealServer, namespace: str, key: str, data: bytes) -> None:
    """An attacker with the bucket and the index: new bytes under the key, and the index's digest to match."""
    services = services_of(server.http)
    name = blob_name(namespace, key)
    services.store.delete(name)
    created = dt.datetime.now(dt.timezone.utc).isoformat()
    services.store.put(
        name, [data], {"namespace": namespace, "key": key, "sha256": sha(data), "created": created}
    )
    with services.database.transaction() as session:
        session.execute(
            update(Entry)
            .where(Entry.namespace == namespace, Entry.key == key)
            .values(sha256=sha(data), size=len(data))
        )


def test_a_replaced_entry_reaches_a_job_without_trusted_keys_and_not_one_with_them(
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
    alice: Signer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    entries = {str(10**20 + i): os.urandom(2000 + i) for i in range(6)}
    upload_signed(real_server, namespace, alice, entries, tmp_path / "job")
    real_server.put(namespace, "77", b"stored by someone without the key")
    victim, evil = sorted(entries)[0], b"\x7fELF evil" * 300
    poison(real_server, namespace, victim, evil)
    assert real_server.entry(namespace, victim) == evil  # the server serves it as valid

    monkeypatch.setenv(TRUSTED, alice.public_text())
    caplog.set_level(logging.WARNING, logger="xla_cache")
    report = warm(real_server.url, tmp_path / "verifying", initialize=False, fingerprint=fingerprint)
    directory = tmp_path / "verifying" / namespace
    assert (report.downloaded_entries, report.unverified_entries, report.errors) == (5, 2, [])
    assert not (directory / victim).exists() and not (directory / "77").exists()  # compiled by the job
    for key in sorted(entries)[1:]:
        assert (directory / key).read_bytes() == entries[key]
    [warning] = warnings_of(caplog)
    assert "skipped 2 entries" in warning and "1 bad signature" in warning and "1 unsigned" in warning

    monkeypatch.delenv(TRUSTED)  # without trusted keys, the server's word is taken: the job loads it
    report = warm(real_server.url, tmp_path / "trusting", initialize=False, fingerprint=fingerprint)
    assert (report.downloaded_entries, report.unverified_entries) == (7, 0)
    assert (tmp_path / "trusting" / namespace / victim).read_bytes() == evil


def test_replayed_signatures_and_revoked_keys_are_skipped(
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
    alice: Signer,
    bob: Signer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    signed = {"1001": os.urandom(1500), "1002": os.urandom(1600)}
    upload_signed(real_server, namespace, alice, signed, tmp_path / "alice")
    upload_signed(real_server, namespace, bob, {"2001": os.urandom(1700)}, tmp_path / "bob")
    # Replayed: alice's signature of 1001 sent with other bytes under another key, and over another namespace.
    replayed = real_server.http.get(f"/v1/namespaces/{namespace}/entries/1001").headers[SIGNATURE_HEADER]
    other = b"not what alice signed"
    assert put(real_server.http, namespace, "3001", other, **{SIGNATURE_HEADER: replayed}).status_code == 201
    foreign = alice.sign("another-namespace", "3002", sha(other))
    assert put(real_server.http, namespace, "3002", other, **{SIGNATURE_HEADER: foreign}).status_code == 201

    keys = tmp_path / "trusted.pub"
    keys.write_text(f"# rotated: bob's key removed\n{alice.public_text()} alice\n")
    monkeypatch.setenv(TRUSTED, str(keys))
    report = warm(real_server.url, tmp_path / "one", initialize=False, fingerprint=fingerprint)
    assert (report.downloaded_entries, report.unverified_entries) == (2, 3)
    assert sorted(p.name for p in (tmp_path / "one" / namespace).iterdir() if p.name[0] != ".") == sorted(
        signed
    )

    monkeypatch.setenv(TRUSTED, f"{keys},{bob.public_text()}")  # several at once: a file and a key
    report = warm(real_server.url, tmp_path / "two", initialize=False, fingerprint=fingerprint)
    assert (report.downloaded_entries, report.unverified_entries) == (3, 2)  # the replays stay out


def test_the_follower_places_only_what_a_trusted_key_signed(
    fake_torch_xla: FakeTorchXla,
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
    alice: Signer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TRUSTED, alice.public_text())
    report = warm(real_server.url, tmp_path, fingerprint=fingerprint, timeout=TIMEOUT, follow=True)
    assert report.following
    directory = tmp_path / namespace
    real_server.put(namespace, "500", b"unsigned, from another job")
    signed = os.urandom(900)
    upload_signed(real_server, namespace, alice, {"501": signed}, tmp_path / "other-job")
    wait_until(lambda: (directory / "501").exists(), timeout=15)
    assert (directory / "501").read_bytes() == signed
    follower = warm_module._PROCESS.follower
    assert follower is not None
    wait_until(lambda: follower.report().unverified == 1, timeout=5)
    assert not (directory / "500").exists()


def test_the_run_report_counts_the_entries_a_job_skipped(
    fake_torch_xla: FakeTorchXla,
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
    alice: Signer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The skipped entries are in the run's numbers on the server too, not only in the warm's report."""
    entries = {str(10**20 + i): os.urandom(1000 + i) for i in range(3)}
    upload_signed(real_server, namespace, alice, entries, tmp_path / "job")
    real_server.put(namespace, "78", b"stored by someone without the key")
    monkeypatch.setenv(TRUSTED, alice.public_text())
    report = warm(real_server.url, tmp_path / "verifying", fingerprint=fingerprint, timeout=TIMEOUT)
    assert (report.downloaded_entries, report.unverified_entries) == (3, 1)
    stop()  # the exit's report
    run = real_server.http.get(f"/admin/runs/{report.run_id}").json()
    assert run["unverified_entries"] == 1 and run["warm_entries"] == 3
