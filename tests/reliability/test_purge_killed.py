"""A purge of a signer and a namespace's delete killed midway (issue 36, item 7), against a real server on
SQLite and PostgreSQL with a local store: the index keeps whole batches (every row left is served), the
retry, called as the CLI calls it until ``remaining`` is 0, removes the rest, and gc removes the blobs whose
rows went before the kill."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import httpx
import pytest

from bench.incident import SIGNER, populate
from cache_server.wiring import build_services
from tests.support.deployment import Deployment
from tests.support.harness import BlobView, Crashable, IndexView
from tests.support.migrated import migrated
from tests.support.wait import wait_until

ENTRIES = 1500
ROUND = 500


def _seed(deployment: Deployment, data_dir: Path, operation: str) -> str:
    settings = deployment.settings(data_dir, access_flush_seconds=60.0)
    if deployment.database == "sqlite":
        migrated(settings)
    services = build_services(settings)
    try:
        populate(services, "leaked", ENTRIES, signer=SIGNER if operation == "signer" else None)
    finally:
        services.stop()
    return "leaked"


def _call(api: httpx.Client, operation: str) -> dict[str, int]:
    """One call of the operation, as the CLI makes it: at most ROUND entries; a 503 (the index busy past its
    statement timeout on a loaded machine) is asked again after its Retry-After, as a caller would."""
    for _ in range(5):
        if operation == "signer":
            response = api.post(f"/admin/signers/{SIGNER}/purge", json={"max_entries": ROUND})
        else:
            response = api.delete("/admin/namespaces/leaked", params={"max_entries": ROUND})
        if response.status_code != 503:
            break
        time.sleep(min(float(response.headers.get("retry-after") or 1), 5))
    assert response.status_code == 200, response.text
    answer = response.json()
    removed = answer["evicted"] if operation == "signer" else answer["deleted_entries"]
    return {"removed": int(removed), "remaining": int(answer["remaining"])}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("operation", ["signer", "namespace"])
@pytest.mark.parametrize("deployment", ["sqlite-local", "postgresql-local"], indirect=True)
def test_killed_midway_the_retry_removes_the_rest(
    deployment: Deployment, operation: str, tmp_path: Path, server_env: dict[str, str]
) -> None:
    server = Crashable(deployment, tmp_path / "server", server_env)
    server.migrate()
    namespace = _seed(deployment, server.data_dir, operation)
    blobs = BlobView(deployment)
    with server.running() as (live, api):
        assert _call(api, operation) == {"removed": ROUND, "remaining": ENTRIES - ROUND}
        threshold = ENTRIES - ROUND - 1  # the second call's rows are deleted, its first blob is gone

        def second() -> None:  # answered or not: the server is killed while it removes the blobs
            with (
                contextlib.suppress(httpx.TransportError),
                httpx.Client(base_url=live.url, timeout=60) as other,
            ):
                _call(other, operation)

        caller = threading.Thread(target=second)
        caller.start()
        wait_until(lambda: len(blobs.names(namespace)) <= threshold, timeout=60, interval=0.001)
        server.kill(live)
        caller.join(timeout=60)
        at_kill = len(blobs.names(namespace))
    with server.running() as (live, api):
        index = IndexView(api)
        rows = index.rows(namespace)
        assert len(rows) == ENTRIES - 2 * ROUND  # whole batches: the second call's rows all went
        reads = index.read(namespace, sorted(rows))
        assert all(status == 200 for status, _ in reads.values()), "a row without its blob"
        calls = []
        while True:
            calls.append(_call(api, operation))
            if calls[-1]["remaining"] == 0:
                break
        assert sum(call["removed"] for call in calls) == ENTRIES - 2 * ROUND
        gc = index.gc()
        assert gc["orphan_blobs_removed"] == at_kill - len(rows), gc
        assert blobs.names(namespace) == set()
        if operation == "namespace":
            assert api.get(f"/v1/namespaces/{namespace}").status_code == 404
        else:
            signers = api.get("/admin/signers").json()["signers"]
            assert SIGNER not in {s["signer"] for s in signers}
    print(
        f"\n{deployment.database} {operation}: killed with {at_kill - (ENTRIES - 2 * ROUND)} orphan blobs "
        f"of {ROUND}; retry: {len(calls)} call(s), gc removed {gc['orphan_blobs_removed']}"
    )
