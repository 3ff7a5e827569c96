"""A quota changed while a bulk upload streams reaches it at its next group commit (issue 36, item 4), against
a real server on SQLite and PostgreSQL: the members committed before the change keep their place, those of
later groups are admitted in stream order up to the new quota, the rest refused with 507 quota_exceeded and
nothing of them stored."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cache_protocol.tar import END
from cache_server.auth.tokens import Role, TokenManager
from cache_server.index import Database, TokenRepository
from cache_server.service.bulk import GROUP_ENTRIES
from cache_server.settings import Settings
from cache_server.storage.base import blob_name
from cache_server.storage.local import LocalBlobStore
from tests.support.api import bearer, stream_member
from tests.support.databases import fresh_database_url
from tests.support.server import run_server

KEEP = 3  # members admitted after the first group's commit, under the lowered quota
SENT = GROUP_ENTRIES + 300


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_quota_lowered_mid_stream_bounds_the_upload(
    kind: str, tmp_path: Path, server_env: dict[str, str]
) -> None:
    with fresh_database_url(kind, tmp_path, at_head=True) as url:
        settings = Settings(data_dir=tmp_path, database_url=url, auth=True)
        database = Database.from_settings(settings)
        manager = TokenManager(TokenRepository(database))
        admin_token, ci_token = manager.create("ops", Role.ADMIN)[0], manager.create("ci", Role.WRITE)[0]
        database.dispose()
        env = {**server_env, "XLA_CACHE_AUTH": "on", "XLA_CACHE_DATABASE_URL": url}
        with (
            run_server(tmp_path, env) as server,
            httpx.Client(base_url=server.url, headers=bearer(admin_token), timeout=30) as admin,
            httpx.Client(base_url=server.url, headers=bearer(ci_token), timeout=60) as ci,
        ):
            lowered_at: list[int] = []

            def body() -> Iterator[bytes]:
                for i in range(SENT):
                    yield stream_member(f"k{i:04d}", f"entry {i}".encode())
                    if i == GROUP_ENTRIES + 7:  # the first group is in, no quota applied when it began
                        _wait_stored(admin, f"k{GROUP_ENTRIES - 1:04d}")
                        quota = {"max_entries": GROUP_ENTRIES + KEEP}
                        assert admin.put("/admin/quotas/namespace/flow", json=quota).status_code == 200
                        lowered_at.append(i + 1)
                yield END

            answer = ci.post(
                "/v1/namespaces/flow/entries", content=body(), headers={"Content-Type": "application/x-tar"}
            )
            assert answer.status_code == 200, answer.text
            results = answer.json()["results"]
            statuses = [r["status"] for r in results]
            assert statuses == [201] * (GROUP_ENTRIES + KEEP) + [507] * (SENT - GROUP_ENTRIES - KEEP)
            assert {r["error"] for r in results[GROUP_ENTRIES + KEEP :]} == {"quota_exceeded"}
            listed = admin.get("/admin/quotas").json()["quotas"]
            assert [q["entries"] for q in listed if q["subject"] == "flow"] == [GROUP_ENTRIES + KEEP]
            blobs = LocalBlobStore(tmp_path / "blobs")
            refused = range(GROUP_ENTRIES + KEEP, SENT)
            assert all(blobs.stat(blob_name("flow", f"k{i:04d}")) is None for i in refused)
            print(
                f"\n{kind}: quota lowered to {GROUP_ENTRIES + KEEP} entries after {lowered_at[0]} of {SENT} "
                f"members sent: {statuses.count(201)} stored, {statuses.count(507)} refused"
            )


def _wait_stored(admin: httpx.Client, key: str) -> None:
    deadline = time.monotonic() + 30
    while admin.get(f"/v1/namespaces/flow/entries/{key}").status_code != 200:
        assert time.monotonic() < deadline, f"{key} was never committed"
        time.sleep(0.05)
