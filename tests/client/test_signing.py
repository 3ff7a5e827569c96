"""Jobs verify: with trusted keys (``XLA_CACHE_TRUSTED_KEYS``) a warm and the follower place only entries a
trusted key signed, whatever the server vouches for. The attacker here has write access to the blob store
and the index and replaces an entry's bytes and digest together, so the server serves them as valid."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from cache_protocol import SHA256_HEADER
from cache_protocol.signing import SIGNATURE_HEADER, Signer, Verifier
from cache_server.index.models import Entry
from cache_server.storage.base import blob_name
from tests.support.api import put, sha
from tests.support.apps import services_of
from tests.support.client_kit import FakeTorchXla, RealServer, warnings_of
from tests.support.wait import wait_until
from xla_cache import stop, warm
from xla_cache import warming as warm_module
from xla_cache.errors import ServerError
from xla_cache.http.api import CacheApi, RemoteEntry
from xla_cache.http.deadline import Deadline
from xla_cache.localcache.cachedir import scan
from xla_cache.runs import process as process_module
from xla_cache.transfer import download as download_module
from xla_cache.transfer.download import DownloadOptions, download
from xla_cache.transfer.follower import Follower
from xla_cache.transfer.trust import EntryTrust
from xla_cache.transfer.upload import upload_entries

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


class Impostor(httpx.BaseTransport):
    """A hostile server in front of the real one: it names ``key`` again, as other bytes with no signature
    (``forge`` rewrites the entries of the manifest or the n-th feed answer), answers the first GET of the
    key with 503 if told to, and then serves the other bytes for it, after ``delay`` seconds."""

    def __init__(
        self,
        real: RealServer,
        key: str,
        evil: bytes,
        forge: Callable[[str, int, list[dict[str, Any]]], list[dict[str, Any]]],
        *,
        fail_first_get: bool = False,
        delay: float = 0.0,
    ) -> None:
        self.real, self.key, self.evil, self.forge = real, key, evil, forge
        self.fail_first_get, self.delay = fail_first_get, delay
        self.forged = {"key": key, "size": len(evil), "sha256": sha(evil), "signature": None}
        self.gets = self.evil_served = 0
        self._feeds = 0
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and path.endswith(f"/entries/{self.key}"):
            with self._lock:
                self.gets += 1
                first = self.gets == 1
            if first and self.fail_first_get:
                return httpx.Response(503, json={"error": "storage_unavailable", "detail": "on purpose"})
            time.sleep(self.delay)  # the verify-ahead thread has judged the whole list by now
            with self._lock:
                self.evil_served += 1
            return httpx.Response(200, headers={SHA256_HEADER: sha(self.evil)}, content=self.evil)
        response = self.real.transport.handle_request(request)
        what = path.rsplit("/", 1)[-1]
        if what not in ("manifest", "feed") or response.status_code != 200:
            return response
        body = json.loads(response.read())
        if what == "feed":
            with self._lock:
                self._feeds += 1
                nth = self._feeds
        body["entries"] = self.forge(what, nth if what == "feed" else 1, body["entries"])
        return httpx.Response(200, json=body)


def test_a_manifest_naming_a_key_twice_places_nothing_of_it(
    real_server: RealServer,
    fingerprint: dict[str, Any],
    namespace: str,
    tmp_path: Path,
    alice: Signer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server lists a key signed by a trusted key, then the same key again with other bytes and no
    signature, and answers slowly: the verdict on the first must not let the second's bytes in."""
    entries = {"1001": os.urandom(1500), "1002": os.urandom(1600)}
    upload_signed(real_server, namespace, alice, entries, tmp_path / "job")
    evil = b"\x7fELF evil" * 200
    impostor = Impostor(
        real_server, "1001", evil, lambda what, n, listed: [*listed, impostor.forged], delay=0.3
    )
    monkeypatch.setattr(download_module, "LARGE_ENTRY_BYTES", 1)  # single GETs, as in the attack
    api = CacheApi(real_server.url, transport=impostor)
    with pytest.raises(ServerError, match="naming entry '1001' twice"):
        api.manifest(namespace, Deadline(TIMEOUT))

    # A warm refuses that manifest as a server error: the job goes on and compiles, nothing is placed.
    monkeypatch.setattr(
        warm_module,
        "CacheApi",
        lambda server, token=None, **kw: CacheApi(server, token, transport=impostor, **kw),
    )
    monkeypatch.setenv(TRUSTED, alice.public_text())
    report = warm(real_server.url, tmp_path / "warm", initialize=False, fingerprint=fingerprint)
    assert report.downloaded_entries == 0 and "twice" in " ".join(report.errors)
    assert not (tmp_path / "warm" / namespace / "1001").exists() and impostor.evil_served == 0

    # And were such a list downloaded anyway, each copy is judged on its own digest and signature.
    signed = {e.key: e for e in real_server.api().manifest(namespace, Deadline(TIMEOUT)).entries}
    forged = RemoteEntry("1001", len(evil), sha(evil))
    trust = EntryTrust(Verifier({alice.key_id: alice.public}), namespace)
    directory = tmp_path / "download"
    directory.mkdir()
    options = DownloadOptions(deadline=Deadline(TIMEOUT), trust=trust)
    result = download(api, namespace, [signed["1001"], forged], directory, options)
    assert not (directory / "1001").exists()  # the signed one's GET got the evil bytes: not its digest
    assert trust.refused == 1 and trust.reasons() == "1 unsigned"  # the other is not fetched at all
    assert result.entries == 0 and impostor.evil_served == 1 and "1001" in " ".join(result.errors)


@pytest.mark.parametrize("when", ["in-the-same-answer", "in-a-later-answer"])
def test_the_follower_never_places_a_key_named_again_with_other_bytes(
    real_server: RealServer, namespace: str, tmp_path: Path, alice: Signer, when: str
) -> None:
    """The follower's first fetch of a signed key fails; the server names the key again, with other bytes
    and no signature, in the same feed answer or the next one: those bytes are never placed."""
    upload_signed(real_server, namespace, alice, {"1001": os.urandom(1500)}, tmp_path / "job")
    evil = b"\x7fELF evil" * 200

    def forge(what: str, nth: int, listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if when == "in-the-same-answer":
            return [*listed, impostor.forged] if listed else listed
        return [impostor.forged] if nth > 1 else listed

    impostor = Impostor(real_server, "1001", evil, forge, fail_first_get=True)
    api = CacheApi(real_server.url, transport=impostor)
    directory = tmp_path / "follow"
    directory.mkdir()
    follower = Follower(
        api, namespace, directory, 0, trusted=Verifier({alice.key_id: alice.public}), wait=0.2
    )
    placed = directory / "1001"
    follower.start()
    try:
        if when == "in-the-same-answer":  # refused whole, as a server error
            wait_until(
                lambda: placed.exists() or any("twice" in e for e in follower.report().errors), timeout=10
            )
        else:  # judged on its own: unsigned
            wait_until(lambda: placed.exists() or follower.report().unverified == 1, timeout=10)
    finally:
        follower.stop()
    assert not placed.exists() and impostor.evil_served == 0
    assert impostor.gets == (0 if when == "in-the-same-answer" else 1)


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
    follower = process_module.PROCESS.follower
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
