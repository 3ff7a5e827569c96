"""A full disk, for real (a tmpfs of a few MiB, see tests/support/small_fs.py): under the server's blob store
(and under its whole data directory, SQLite index included), and under a training job's cache directory.

Server: uploads past the free space are refused with a JSON 503 (never a 500) and leave nothing behind;
what was stored stays readable; once space is freed, uploads work again. Client: ``warm()`` into a full
directory fails open: it returns, names the error, leaves no temporary file, and every file it did place is
complete and verified.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from cache_protocol import FINGERPRINT_FILE, SHA256_HEADER
from tests.support.api import put, sha
from tests.support.client_kit import FACTS
from tests.support.harness import MIB
from tests.support.server import LiveServer, run_server
from tests.support.small_fs import free_bytes, small_filesystem
from xla_cache import warm
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.frameworks.torch_xla import build_fingerprint
from xla_cache.localcache.cachedir import TEMP_SUFFIX, file_sha256

DISK = 4 * MIB
ENTRY = 600 * 1024


def assert_refused(response: httpx.Response) -> None:
    """A disk-full refusal: 503 (or 507) with the JSON error body and Retry-After, never a 500."""
    assert response.status_code in (503, 507), response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers.get("retry-after"), response.headers
    body = response.json()
    assert body["error"] in ("storage_unavailable", "index_unavailable"), body
    assert "Traceback" not in body["detail"]


def nothing_partial(store: Path) -> None:
    """No upload temp file, and no blob but complete ones (each blob file is its header plus its bytes)."""
    assert list((store / ".tmp").iterdir()) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("on_small_disk", ["blob store", "data directory"])
def test_server_on_a_full_disk(tmp_path: Path, server_env: dict[str, str], on_small_disk: str) -> None:
    """``blob store``: XLA_CACHE_STORAGE_URL on the small disk (the index elsewhere); ``data directory``:
    the embedded default, SQLite index and blobs, all on the small disk."""
    rng = random.Random(7)
    with small_filesystem(tmp_path / "disk", DISK) as disk:
        if on_small_disk == "blob store":
            env = {"XLA_CACHE_STORAGE_URL": (disk / "blobs").as_uri()}
        else:
            env = {"XLA_CACHE_DATA_DIR": str(disk)}  # the server's log stays on the big disk
        store = disk / "blobs"
        with (
            run_server(tmp_path / "server", {**env, **server_env}) as server,
            httpx.Client(base_url=server.url, timeout=60) as api,
        ):
            stored: dict[str, bytes] = {}
            refusals: list[httpx.Response] = []
            for i in range(2 * DISK // ENTRY):  # twice what fits
                data = rng.randbytes(ENTRY)
                response = put(api, "full", f"k{i}", data)
                if response.status_code == 201:
                    assert not refusals, "an upload was stored after the disk was full"
                    stored[f"k{i}"] = data
                else:
                    refusals.append(response)
                    assert api.get(f"/v1/namespaces/full/entries/k{i}").status_code == 404
            assert 3 <= len(stored) <= DISK // ENTRY, len(stored)
            assert refusals
            for response in refusals:
                assert_refused(response)
            nothing_partial(store)
            assert free_bytes(disk) < ENTRY
            # A large upload that runs out of space half way is refused and leaves nothing.
            assert_refused(put(api, "full", "large", rng.randbytes(3 * MIB)))
            nothing_partial(store)
            # What was stored before is intact, and listed.
            assert_intact(api, stored)
            assert api.get("/healthz").status_code == 200

            # Space comes back: an admin deletes two entries (rows, then blobs), and uploads work again.
            deletes = []
            for key in sorted(stored)[:2]:
                deleted = api.delete(f"/v1/namespaces/full/entries/{key}")
                error = deleted.json()["error"] if deleted.content else ""
                deletes.append(f"{deleted.status_code} {error}".strip())
                if deleted.status_code == 503:  # the index itself could not write on the full disk
                    assert on_small_disk == "data directory"
                    assert_refused(deleted)
                    assert "disk of the index database is full" in deleted.json()["detail"]  # says why
                    (store / "full" / key).unlink()  # the operator frees space by hand, then gc or retry
                    continue
                assert deleted.status_code == 204, deleted.text
                del stored[key]
            again = rng.randbytes(ENTRY)
            response = put(api, "full", "after", again)
            assert response.status_code == 201, response.text
            stored["after"] = again
            gc = api.post("/admin/gc", json={"grace_seconds": 0})
            assert gc.status_code == 200, gc.text
            stored = {key: data for key, data in stored.items() if (store / "full" / key).exists()}
            assert_intact(api, stored)
            nothing_partial(store)
            log = server.log()
            assert "unhandled error" not in log and "Traceback" not in log, log
            print(
                f"\n{on_small_disk} on a {DISK // MIB} MiB disk: {len(refusals)} uploads of "
                f"{ENTRY // 1024} KiB refused with {sorted({r.status_code for r in refusals})} "
                f"({sorted({r.json()['error'] for r in refusals})}), then a 3 MiB one; "
                f"{len(stored)} entries intact; deletes answered {deletes}; uploads work again"
            )


def assert_intact(api: httpx.Client, stored: dict[str, bytes]) -> None:
    manifest = api.get("/v1/namespaces/full/manifest").json()
    assert {entry["key"] for entry in manifest["entries"]} == set(stored)
    for key, data in stored.items():
        response = api.get(f"/v1/namespaces/full/entries/{key}")
        assert response.status_code == 200 and response.content == data, key


@pytest.fixture
def seeded_server(tmp_path: Path, server_env: dict[str, str]) -> Any:
    with run_server(tmp_path / "server", server_env) as server:
        yield server


def seed_namespace(server: LiveServer, namespace: str, count: int, size: int) -> dict[str, bytes]:
    rng = random.Random(3)
    entries = {str(10**20 + i): rng.randbytes(size) for i in range(count)}
    with httpx.Client(base_url=server.url, timeout=60) as api:
        for key, data in entries.items():
            url = f"/v1/namespaces/{namespace}/entries/{key}"
            assert api.put(url, content=data, headers={SHA256_HEADER: sha(data)}).status_code == 201
    return entries


@pytest.mark.timeout(120)
def test_warm_into_a_full_cache_directory_fails_open(seeded_server: LiveServer, tmp_path: Path) -> None:
    """12 entries of 256 KiB (3 MiB) for a cache directory on a 1 MiB disk: the warm places what fits,
    reports the rest as one error, and a second warm into the now full disk fails open just the same."""
    fingerprint = build_fingerprint(FACTS, env={})
    namespace = namespace_id(fingerprint)
    entries = seed_namespace(seeded_server, namespace, 12, 256 * 1024)
    with small_filesystem(tmp_path / "cache", MIB) as cache_dir:
        reports = []
        for attempt in range(2):
            if attempt == 1:  # then not one byte free: another program filled the disk
                fill(cache_dir / "ballast")
            report = warm(seeded_server.url, cache_dir, initialize=False, fingerprint=fingerprint, timeout=30)
            reports.append(report)
            directory = cache_dir / namespace
            assert report.errors, report
            assert any("No space left" in error for error in report.errors), report.errors
            names = os.listdir(directory) if directory.is_dir() else []
            assert not [name for name in names if name.endswith(TEMP_SUFFIX)], names
            placed = [name for name in names if name in entries]
            for name in placed:  # whatever is there is whole and right
                assert file_sha256(directory / name) == sha(entries[name]), name
            assert report.downloaded_entries <= len(placed) < len(entries)
            assert set(names) <= {*entries, FINGERPRINT_FILE, ".xla-cache.lock"}, names
            assert free_bytes(cache_dir) < 256 * 1024
        print(
            f"\nwarm into a 1 MiB cache directory, 12 entries of 256 KiB on the server: "
            f"{[(r.downloaded_entries, r.errors[0]) for r in reports]}"
        )


def fill(path: Path) -> None:
    """Write zeros into ``path`` until its filesystem has no byte left."""
    with open(path, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass
