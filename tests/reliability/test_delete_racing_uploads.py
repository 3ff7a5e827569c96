"""A namespace deleted in rounds while jobs keep uploading into it (issue 42, item 4), against a real server
on SQLite and PostgreSQL with a local store.

Several threads ``PUT`` new keys (and one sends bulk uploads) into one namespace while another calls
``DELETE /admin/namespaces/{ns}?max_entries=50`` over and over, as ``xla-cache delete-namespace`` does, so
that its last round (the one that drops the namespace's row) keeps meeting uploads that are committing;
the uploads go on a little after the delete stops, so some entries stay. Every upload answered 201 must then
be readable, or have been removed by a round with its tombstone; no upload or round may answer 500; and
after a gc with no grace period no blob of the namespace lacks its row.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from cache_server.index.database import Database
from cache_server.index.tombstones import tombstones_of
from cache_server.storage.base import blob_name
from tests.support.api import member, post_bulk, put
from tests.support.deployment import Deployment
from tests.support.harness import BlobView, Crashable, IndexView
from tests.support.wait import wait_until

NS = "racing"
PUTTERS = 4  # threads sending single PUTs
BULK_MEMBERS = 20  # members of each bulk upload (one thread sends them)
PAUSE = 0.05  # seconds each uploading thread waits between two uploads: the delete must catch up often
ROUND = 50  # max_entries of each call of the delete
WHOLE_DELETES = 5  # the uploads go on until the delete has emptied the namespace this many times...
ACKNOWLEDGED = 300  # ... and this many uploads were answered 201


@dataclass
class Tally:
    """What the threads saw: the keys answered 201, and every answer's status."""

    acknowledged: set[str] = field(default_factory=set)
    statuses: list[int] = field(default_factory=list)
    delete_statuses: list[int] = field(default_factory=list)
    completed_deletes: int = 0  # rounds that answered remaining 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def upload(self, status: int, key: str) -> None:
        with self.lock:
            self.statuses.append(status)
            if status == 201:
                self.acknowledged.add(key)


def data_of(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest() * 32  # 1 KiB, different for each key


def _until(stop: threading.Event, work: Callable[[httpx.Client, int], None], url: str) -> Callable[[], None]:
    """A thread's body: ``work(client, round)`` over and over until ``stop`` is set."""

    def body() -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            turn = 0
            while not stop.is_set():
                work(http, turn)
                turn += 1

    return body


@pytest.mark.timeout(120)
@pytest.mark.parametrize("deployment", ["sqlite-local", "postgresql-local"], indirect=True)
def test_a_namespace_deleted_while_uploads_commit_loses_nothing_acknowledged(
    deployment: Deployment, tmp_path: Path, server_env: dict[str, str]
) -> None:
    server = Crashable(deployment, tmp_path / "server", server_env)
    server.migrate()
    tally = Tally()
    stop_deleting, stop_uploading = threading.Event(), threading.Event()

    def putter(index: int) -> Callable[[httpx.Client, int], None]:
        def work(http: httpx.Client, turn: int) -> None:
            key = f"p{index}-{turn:06d}"
            tally.upload(put(http, NS, key, data_of(key)).status_code, key)
            time.sleep(PAUSE)

        return work

    def bulk(http: httpx.Client, turn: int) -> None:
        keys = [f"b-{turn:05d}-{i:03d}" for i in range(BULK_MEMBERS)]
        response = post_bulk(http, NS, [member(key, data_of(key)) for key in keys])
        time.sleep(PAUSE * BULK_MEMBERS / 2)
        if response.status_code != 200:
            tally.upload(response.status_code, "")
            return
        for result in response.json()["results"]:
            tally.upload(int(result["status"]), str(result["key"]))

    def delete(http: httpx.Client, turn: int) -> None:
        response = http.delete(f"/admin/namespaces/{NS}", params={"max_entries": ROUND})
        with tally.lock:
            tally.delete_statuses.append(response.status_code)
            if response.status_code == 200 and response.json()["remaining"] == 0:
                tally.completed_deletes += 1
        if response.status_code == 404:  # dropped, and no upload has made it again yet
            time.sleep(0.01)

    with server.running() as (live, api):
        uploads = [putter(index) for index in range(PUTTERS)] + [bulk]
        uploaders = [threading.Thread(target=_until(stop_uploading, work, live.url)) for work in uploads]
        deleter = threading.Thread(target=_until(stop_deleting, delete, live.url))
        for thread in [*uploaders, deleter]:
            thread.start()
        wait_until(
            lambda: tally.completed_deletes >= WHOLE_DELETES and len(tally.acknowledged) >= ACKNOWLEDGED,
            timeout=60,
            message=lambda: f"the delete never caught up with the uploads: {tally.completed_deletes} times",
        )
        stop_deleting.set()
        deleter.join(60)
        after_the_delete = len(tally.acknowledged)  # the uploads go on a little: some entries stay
        wait_until(lambda: len(tally.acknowledged) >= after_the_delete + 2 * BULK_MEMBERS, timeout=60)
        stop_uploading.set()
        for thread in uploaders:
            thread.join(60)
        index = IndexView(api)
        manifest = api.get(f"/v1/namespaces/{NS}/manifest")
        rows = index.rows(NS) if manifest.status_code == 200 else {}
        acknowledged = sorted(tally.acknowledged)
        reads = index.read(NS, acknowledged)
        unread = [key for key in acknowledged if reads[key][0] != 200]
        db = Database.from_settings(deployment.settings(tmp_path / "look"))
        try:
            buried = tombstones_of(db, NS, unread)
        finally:
            db.dispose()
        lost = [key for key in unread if key not in buried]
        gc = index.gc()
        blobs = BlobView(deployment).names(NS)
        log = live.log()
    orphans = blobs - {blob_name(NS, key) for key in rows}
    server_errors = [status for status in tally.statuses + tally.delete_statuses if status >= 500]
    print(
        f"\n{deployment.database}: {len(acknowledged)} uploads answered 201, {tally.completed_deletes} whole "
        f"deletes in {len(tally.delete_statuses)} rounds; {len(acknowledged) - len(unread)} readable, "
        f"{len(buried)} tombstoned, {len(lost)} lost; answers of 5xx: {server_errors}; gc removed "
        f"{gc['orphan_blobs_removed']} orphans, {len(orphans)} blobs without a row after it"
    )
    assert len(acknowledged) > len(unread), "nothing stayed readable: the check of the rows was not run"
    assert not lost, f"{len(lost)} uploads answered 201 and then vanished with no tombstone: {lost[:5]}"
    assert all(buried[key].policy == "namespace_deleted" for key in buried)
    assert not [status for status in server_errors if status != 503], server_errors
    assert set(tally.statuses) <= {201, 503}, sorted(set(tally.statuses))
    assert "Traceback" not in log, log[-3000:]
    assert not orphans, sorted(orphans)[:5]
