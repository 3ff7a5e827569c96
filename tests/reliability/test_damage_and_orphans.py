"""Damaged blobs and orphan blobs against a real ``xla-cache-server serve`` (issue 25, items 3 and 4).

Before (7499194): one damaged byte in a blob's header made ``/admin/gc`` (and its dry run) answer 500, a PUT
of that key 500, and ``reindex`` (plain, ``--verify``, ``--dry-run``) exit 1 having recovered 0 of 5
entries; a directory in place of a blob made GET answer 500. An orphan blob (no index row) with other bytes
made every PUT of its key answer 409 while GET answered 404, until an admin ran gc past its one-hour grace.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from cache_server import cli
from cache_server.index.migrate import downgrade, upgrade
from cache_server.storage import BlobStore, open_store
from cache_server.storage.local import LocalBlobStore
from tests.support.api import member, post_bulk, put, sha
from tests.support.deployment import Deployment
from tests.support.server import run_server
from tests.support.wait import wait_until


def bulk(client: httpx.Client, namespace: str, members: dict[str, bytes]) -> dict[str, dict[str, object]]:
    """A bulk upload that the server answers 200: each member's result by key."""
    response = post_bulk(client, namespace, [member(key, data) for key, data in members.items()])
    assert response.status_code == 200, response.text
    return {result["key"]: result for result in response.json()["results"]}


def reindex(
    deployment: Deployment, data_dir: Path, monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str]:
    """``xla-cache-server reindex`` run in this process (its own code: exit status and printed lines)."""
    for name, value in deployment.env(XLA_CACHE_DATA_DIR=str(data_dir)).items():
        monkeypatch.setenv(name, value)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(["reindex", *args])
    return status, out.getvalue()


def damage_header(path: Path) -> None:
    """Flip one byte of a local blob's 4 KiB header (the opening brace of its JSON metadata)."""
    with open(path, "r+b") as handle:
        handle.seek(10)
        byte = handle.read(1)
        handle.seek(10)
        handle.write(bytes([byte[0] ^ 0x5A]))


@pytest.mark.parametrize("deployment", ["sqlite-local"], indirect=True)
def test_a_damaged_blob_is_reported_by_gc_and_reindex_and_replaced_by_a_put(
    deployment: Deployment, tmp_path: Path, server_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    blobs = Path(deployment.storage_url.removeprefix("file://"))
    entries = {f"k{n}": os.urandom(2000 + n) for n in range(5)}
    with (
        run_server(data_dir, deployment.env(**server_env)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        for key, data in entries.items():
            assert put(client, "vision", key, data).status_code == 201
        for key in ("d", "fifo", "link"):
            assert put(client, "other", key, b"to be replaced by something else").status_code == 201
            (blobs / "other" / key).unlink()
        damage_header(blobs / "vision" / "k2")
        (blobs / "other" / "d").mkdir()  # a directory where a blob should be (its row still there)
        os.mkfifo(blobs / "other" / "fifo")  # a named pipe: a read of it must not hang
        (blobs / "other" / "link").symlink_to(blobs / "vision" / "k0")  # the store never makes links
        for key in ("lost", "lost-in-bulk"):
            orphan(blobs, "other", key, b"a crashed upload's blob")
            damage_header(blobs / "other" / key)  # damaged, and no row

        odd = ("d", "fifo", "link")
        got = {key: client.get(f"/v1/namespaces/other/entries/{key}").status_code for key in odd}
        print(f"GET of a directory, a named pipe, a symbolic link in place of a blob: {got}")
        assert got == {"d": 404, "fifo": 404, "link": 404}
        dry = client.post("/admin/gc", json={"dry_run": True})
        print(f"gc dry run: {dry.status_code}, damaged_blobs={dry.json().get('damaged_blobs')}")
        assert dry.status_code == 200 and dry.json()["damaged_blobs"] == 6
        assert (blobs / "vision" / "k2").is_file() and (blobs / "other" / "d").is_dir()  # left on a dry run

        # A PUT replaces a damaged blob: with new bytes where no row holds the key, with the entry's own
        # bytes where one does (another digest there is a 409, as for any stored entry).
        fresh = put(client, "other", "lost", b"a new build")
        restored = put(client, "vision", "k2", entries["k2"])
        relinked = put(client, "other", "link", b"to be replaced by something else")
        in_bulk = bulk(client, "other", {"lost-in-bulk": b"a new build, in bulk"})["lost-in-bulk"]["status"]
        print(
            f"PUT over a damaged blob: {fresh.status_code} (no row), {restored.status_code} (its row), "
            f"{relinked.status_code} (a symbolic link), {in_bulk} (a bulk member, no row)"
        )
        assert [fresh.status_code, restored.status_code, relinked.status_code, in_bulk] == [201] * 4
        assert client.get("/v1/namespaces/other/entries/lost-in-bulk").content == b"a new build, in bulk"
        assert client.get("/v1/namespaces/other/entries/link").content == b"to be replaced by something else"
        assert client.get("/v1/namespaces/other/entries/lost").content == b"a new build"
        assert client.get("/v1/namespaces/vision/entries/k2").content == entries["k2"]
        assert put(client, "vision", "k2", b"other bytes").status_code == 409

        damage_header(blobs / "vision" / "k2")
        done = client.post("/admin/gc", json={})
        print(f"gc: {done.status_code}, damaged_blobs={done.json().get('damaged_blobs')}")
        assert done.status_code == 200 and done.json()["damaged_blobs"] == 3
        assert not (blobs / "vision" / "k2").exists() and not (blobs / "other" / "d").exists()
        aside = sorted(p.name.split(".")[0] for p in (blobs / ".damaged").glob("*/*"))
        assert aside == ["d", "fifo", "k2", "link"]
        assert (blobs / "vision" / "k0").is_file()  # what the link pointed to stays
        assert client.get("/v1/namespaces/vision/entries/k2").status_code == 404
        assert client.head("/v1/namespaces/other/entries/d").status_code == 404  # its row dropped
        assert client.post("/admin/gc", json={}).json()["damaged_blobs"] == 0
        assert put(client, "vision", "k2", b"k2, built again").status_code == 201  # stored afresh
        assert server.log().count("damaged blob vision/k2") == 2  # one line per gc that found it

    # The index is lost and one blob is damaged: reindex recovers every readable entry and reports that one.
    damage_header(blobs / "vision" / "k3")
    settings = deployment.settings(data_dir)
    for mode in ([], ["--verify"], ["--dry-run"]):
        downgrade(settings, "base")
        status, out = reindex(deployment, data_dir, monkeypatch, *mode)
        print(f"reindex {' '.join(mode) or '(plain)'}: exit {status}: {out.strip()}")
        assert status == 0
        assert "8 blobs in 2 namespaces" in out
        assert "7 rows added, 0 already indexed, 1 skipped (1 damaged)" in out
        assert "skipped vision/k3: damaged: its header cannot be read" in out


def orphan(
    store: Path | BlobStore, namespace: str, key: str, data: bytes, claimed: str | None = None
) -> None:
    """A blob written as a crashed upload leaves it: complete, with its metadata, and no index row."""
    metadata = {"namespace": namespace, "key": key, "sha256": claimed or sha(data), "created": "2026-01-01"}
    store = LocalBlobStore(store) if isinstance(store, Path) else store
    assert store.put(f"{namespace}/{key}", [data], metadata) is True


@pytest.mark.parametrize("deployment", ["sqlite-local", "postgresql-gcs"], indirect=True)
def test_an_orphan_blob_never_blocks_a_put(
    deployment: Deployment, tmp_path: Path, server_env: dict[str, str]
) -> None:
    blobs = open_store(deployment.storage_url)
    upgrade(deployment.settings(tmp_path / "data"))  # serve migrates only its embedded SQLite itself
    env = deployment.env(XLA_CACHE_ORPHAN_GRACE_SECONDS="1", **server_env)
    with (
        run_server(tmp_path / "data", env) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        orphan(blobs, "ns", "other", b"an older build")
        orphan(blobs, "ns", "same", b"one build")
        orphan(blobs, "ns", "liar", b"rotten bytes", claimed=sha(b"good bytes"))
        orphan(blobs, "ns", "b-other", b"old")
        orphan(blobs, "ns", "b-same", b"same")
        orphan(blobs, "ns", "raced", b"orphaned")

        # Other bytes: a young orphan may be an upload in flight (503, retry later), for a PUT and in bulk.
        young = put(client, "ns", "other", b"this build")
        where = deployment.storage
        print(f"{where}: PUT over a young orphan, other bytes: {young.status_code} {young.json()['error']}")
        assert young.status_code == 503 and young.headers["Retry-After"]
        assert young.json()["error"] == "entry_in_flight"
        # Metadata claiming the upload's digest over other bytes: corrupt (no upload leaves that), replaced.
        assert put(client, "ns", "liar", b"good bytes").status_code == 201
        assert client.get("/v1/namespaces/ns/entries/liar").content == b"good bytes"
        first = bulk(client, "ns", {"b-other": b"new", "b-same": b"same", "b-new": b"fresh"})
        print(
            f"{deployment.storage}: bulk over orphans:",
            {key: result["status"] for key, result in first.items()},
        )
        assert {key: result["status"] for key, result in first.items()} == {
            "b-other": 503,
            "b-same": 200,
            "b-new": 201,
        }
        # The same bytes: adopted at once, whatever its age (its bytes hashed first).
        adopted = put(client, "ns", "same", b"one build")
        print(f"{deployment.storage}: PUT over an orphan with the same bytes: {adopted.status_code}")
        assert adopted.status_code == 200
        assert client.get("/v1/namespaces/ns/entries/same").content == b"one build"
        assert client.get("/v1/namespaces/ns/entries/b-same").content == b"same"

        # Past the grace period an orphan with other bytes is replaced.
        written = blobs.stat("ns/raced")
        assert written is not None
        wait_until(lambda: dt.datetime.now(dt.timezone.utc) - written.created > dt.timedelta(seconds=1.2))
        stored = put(client, "ns", "other", b"this build")
        print(f"{deployment.storage}: PUT over the orphan past its grace: {stored.status_code}")
        assert stored.status_code == 201
        assert client.get("/v1/namespaces/ns/entries/other").content == b"this build"
        assert put(client, "ns", "other", b"yet another build").status_code == 409  # the index holds it now
        assert bulk(client, "ns", {"b-other": b"new"})["b-other"]["status"] == 201
        assert client.get("/v1/namespaces/ns/entries/b-other").content == b"new"

        # Eight hosts replace one old orphan at once, each with its own bytes: one row, one blob, agreeing.
        builds = [f"build {n}".encode() for n in range(8)]
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda data: put(client, "ns", "raced", data).status_code, builds))
        print(f"{deployment.storage}: 8 racing PUTs over one orphan: {sorted(statuses)}")
        assert statuses.count(201) == 1 and set(statuses) <= {201, 409, 503}
        served = client.get("/v1/namespaces/ns/entries/raced")
        assert served.content == builds[statuses.index(201)]
        assert served.headers["ETag"].strip('"') == sha(served.content)


@pytest.mark.parametrize("deployment", ["sqlite-local"], indirect=True)
def test_background_gc_removes_an_old_orphan_by_itself(
    deployment: Deployment, tmp_path: Path, server_env: dict[str, str]
) -> None:
    blobs = Path(deployment.storage_url.removeprefix("file://"))
    env = deployment.env(
        XLA_CACHE_ORPHAN_GRACE_SECONDS="0.5", XLA_CACHE_GC_INTERVAL_SECONDS="0.5", **server_env
    )
    with (
        run_server(tmp_path / "data", env) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        assert put(client, "ns", "kept", b"an entry").status_code == 201
        orphan(blobs, "ns", "crashed", b"a crashed upload's blob")
        wait_until(  # the orphan gone, and the round's line logged (it comes once the round is over)
            lambda: not (blobs / "ns" / "crashed").exists() and "background gc" in server.log(),
            timeout=20,
            message=lambda: f"background gc never removed the orphan:\n{server.log()}",
        )
        print("background gc: " + next(line for line in server.log().splitlines() if "background gc" in line))
        assert client.get("/v1/namespaces/ns/entries/kept").content == b"an entry"
