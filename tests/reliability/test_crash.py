"""SIGKILL of a real server (supervisor and workers at one instant) in the middle of concurrent uploads, and
in the middle of an eviction, on a local directory and on a bucket; then a restart on the same data.

After each kill: every upload that was acknowledged (2xx) is there with its bytes; no read gives bytes that
are not the entry's (whole or broken off, never complete and wrong); the index has no row without its blob;
and after ``POST /admin/gc`` the store holds exactly the indexed blobs, with no temp file left.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from cache_protocol import SHA256_HEADER
from cache_server.wiring import build_services
from tests.support.api import sha
from tests.support.deployment import Deployment
from tests.support.harness import MIB, BlobView, Crashable, IndexView
from tests.support.migrated import migrated
from tests.support.server import LiveServer
from tests.support.wait import wait_until

# (deployment, workers): the embedded default with one worker; the production shape (PostgreSQL and a
# bucket) with two workers, killed together with their supervisor.
BACKENDS = [("sqlite-local", 1), ("postgresql-gcs", 2)]
UPLOAD_ROUNDS = 5
UPLOADERS = 8
EVICTION_ROUNDS = 3
# Entries an eviction round starts from: a local store deletes a blob in microseconds, a bucket in a request.
EVICTION_ENTRIES = {"local": 300, "gcs": 150}


@dataclass
class Ledger:
    """What the uploaders sent and what the server acknowledged, key -> SHA-256."""

    tried: dict[str, str] = field(default_factory=dict)
    acked: dict[str, str] = field(default_factory=dict)
    refused: Counter[int] = field(default_factory=Counter)  # non-2xx answers, by status
    lock: threading.Lock = field(default_factory=threading.Lock)


def entry_size(rng: random.Random) -> int:
    """Mostly small entries, some of a few hundred KiB, a few over a MiB (several chunks on the way)."""
    kind = rng.random()
    if kind < 0.5:
        return rng.randint(0, 16 * 1024)
    if kind < 0.9:
        return rng.randint(16 * 1024, 512 * 1024)
    return rng.randint(MIB, 3 * MIB)


def upload_until_gone(url: str, namespace: str, prefix: str, seed: int, ledger: Ledger) -> None:
    """Upload fresh random entries one after another until the server stops answering."""
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=60) as client:
        for i in range(100_000):
            key = f"{prefix}-{i}"
            data = rng.randbytes(entry_size(rng))
            digest = sha(data)
            with ledger.lock:
                ledger.tried[key] = digest
            try:
                response = client.put(
                    f"/v1/namespaces/{namespace}/entries/{key}",
                    content=data,
                    headers={SHA256_HEADER: digest},
                )
            except httpx.TransportError:
                return  # killed: this upload was never acknowledged
            with ledger.lock:
                if response.status_code in (200, 201):
                    ledger.acked[key] = digest
                else:
                    ledger.refused[response.status_code] += 1


def check_after_restart(api: httpx.Client, blobs: BlobView, ledgers: list[Ledger]) -> dict[str, int]:
    """The checks of the module docstring after a restart, over the namespace of every round so far (the
    last one, just killed, is also read back entry by entry); returns what was found in the last one."""
    index = IndexView(api)
    rows = {f"crash-{number}": index.rows(f"crash-{number}") for number in range(len(ledgers))}
    for (namespace, found), ledger in zip(rows.items(), ledgers, strict=True):
        lost = sorted(set(ledger.acked) - set(found))
        assert not lost, f"acknowledged uploads lost in {namespace}: {lost}"
        assert set(found) <= set(ledger.tried), "rows of uploads nobody sent"
        assert all(found[key] == ledger.tried[key] for key in found), (
            "a row with another digest than was sent"
        )
        assert {f"{namespace}/{key}" for key in found} <= blobs.names(namespace), "a row without its blob"
    namespace, last, ledger = f"crash-{len(ledgers) - 1}", rows[f"crash-{len(ledgers) - 1}"], ledgers[-1]
    for key, (status, digest) in index.read(namespace, sorted(ledger.tried)).items():
        if key in last:
            assert (status, digest) == (200, ledger.tried[key]), f"{key}: {status}: a row without its blob?"
        else:
            assert status == 404, f"{key}: {status} for an entry that has no row"
    orphans = len(blobs.names(namespace)) - len(last)
    temp_files = blobs.age_temp_files(3600)  # gc removes upload temp files only once they are old
    result = index.gc()
    assert result["rows_dropped"] == 0, result  # no row had lost its blob
    assert result["orphan_blobs_removed"] == orphans, result
    assert result["temp_files_removed"] == temp_files, result
    for namespace, found in rows.items():
        assert blobs.names(namespace) == {f"{namespace}/{key}" for key in found}
    assert blobs.temp_files() == []
    return {
        "acked": len(ledger.acked),
        "rows": len(last),
        "unacked_but_stored": len(set(last) - set(ledger.acked)),
        "orphans_removed": orphans,
        "temp_files_removed": temp_files,
    }


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("deployment", "workers"), BACKENDS, indirect=["deployment"])
def test_sigkill_during_concurrent_uploads(
    deployment: Deployment, workers: int, tmp_path: Path, server_env: dict[str, str]
) -> None:
    rng = random.Random(20261130)
    server = Crashable(deployment, tmp_path / "server", server_env, workers=workers)
    server.migrate()
    blobs = BlobView(deployment)
    ledgers: list[Ledger] = []
    totals: Counter[str] = Counter()
    for round_ in range(UPLOAD_ROUNDS + 1):
        with server.running() as (live, api):
            if ledgers:  # the previous round's crash, and every one before it
                totals.update(check_after_restart(api, blobs, ledgers))
            if round_ == UPLOAD_ROUNDS:
                break
            ledger = Ledger()
            ledgers.append(ledger)
            kill_after = rng.randint(5, 60)  # acknowledged uploads before the kill
            threads = [
                threading.Thread(
                    target=upload_until_gone,
                    args=(live.url, f"crash-{round_}", f"t{t}", rng.randrange(2**32), ledger),
                )
                for t in range(UPLOADERS)
            ]
            for thread in threads:
                thread.start()
            wait_until(acknowledged(ledger, kill_after), timeout=60, message=live.log)
            server.kill(live)
            for thread in threads:
                thread.join(timeout=60)
            totals["temp_files_at_kill"] += len(blobs.temp_files())
            totals["in_flight_at_kill"] += len(ledger.tried) - len(ledger.acked) - ledger.refused.total()
            assert set(ledger.refused) <= {503}, ledger.refused  # uploads_busy at most, never a 500
            assert "Traceback" not in live.log()
    print(
        f"\n{deployment.database}-{deployment.storage}, {workers} worker(s): {UPLOAD_ROUNDS} SIGKILLs of "
        f"{server.kills} processes, {server.starts} starts; {dict(totals)}"
    )
    assert totals["acked"] > 0


def acknowledged(ledger: Ledger, count: int) -> Callable[[], bool]:
    return lambda: len(ledger.acked) >= count


def fewer_blobs(blobs: BlobView, namespace: str, count: int) -> Callable[[], bool]:
    return lambda: blobs.count(namespace) <= count


def seed(deployment: Deployment, data_dir: Path, namespace: str, count: int, rng: random.Random) -> int:
    """Store ``count`` small entries directly through the services (faster than HTTP); returns bytes."""
    settings = deployment.settings(data_dir, access_flush_seconds=60.0)
    if deployment.database == "sqlite":
        migrated(settings)
    services = build_services(settings)
    entries = {f"e{i:05d}": rng.randbytes(rng.randint(1000, 3000)) for i in range(count)}
    try:
        with ThreadPoolExecutor(4) as pool:
            for put in [
                pool.submit(services.cache.put_entry, namespace, key, [data], sha256=sha(data))
                for key, data in entries.items()
            ]:
                put.result()
    finally:
        services.stop()
    return sum(len(data) for data in entries.values())


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("deployment", [name for name, _ in BACKENDS], indirect=True)
def test_sigkill_during_eviction(deployment: Deployment, tmp_path: Path, server_env: dict[str, str]) -> None:
    """Half the rounds kill as soon as the first blob is gone (the rows are deleted, most blobs not yet),
    the others once half of the blobs are. One worker: eviction is one request, served by one worker."""
    rng = random.Random(1130)
    entries = EVICTION_ENTRIES[deployment.storage]
    server = Crashable(deployment, tmp_path / "server", server_env)
    server.migrate()
    blobs = BlobView(deployment)
    outcomes: Counter[str] = Counter()
    orphans = 0
    previous: tuple[str, int, int] | None = None  # namespace, entries seeded, entries to evict
    for round_ in range(EVICTION_ROUNDS + 1):
        with server.running() as (live, api):
            index = IndexView(api)
            if previous is not None:
                namespace, seeded, doomed = previous
                rows = index.rows(namespace)
                # One transaction deletes a batch of rows: all of them are gone, or none.
                assert len(rows) in (seeded, seeded - doomed), (len(rows), seeded, doomed)
                outcomes[
                    "rows kept (killed before the commit)" if len(rows) == seeded else "rows deleted"
                ] += 1
                reads = index.read(namespace, sorted(rows))
                assert all(status == 200 for status, _ in reads.values()), "a row without its blob was served"
                assert all(digest == rows[key] for key, (_, digest) in reads.items())
                stored = blobs.names(namespace)
                assert {f"{namespace}/{key}" for key in rows} <= stored
                result = index.gc()
                assert result["rows_dropped"] == 0, result
                assert result["orphan_blobs_removed"] == len(stored) - len(rows), result
                orphans += len(stored) - len(rows)
                assert blobs.names(namespace) == {f"{namespace}/{key}" for key in rows}
                assert blobs.temp_files() == []
            if round_ == EVICTION_ROUNDS:
                break
            namespace = f"evict-{round_}"
            total = seed(deployment, server.data_dir, namespace, entries, rng)
            budget = {"namespace": namespace, "max_total_bytes": total // 5}
            dry = api.post("/admin/evict", json={**budget, "dry_run": True}).json()
            doomed = int(dry["evicted"])
            assert doomed > entries // 2
            previous = (namespace, entries, doomed)
            threshold = entries - 1 if round_ % 2 == 0 else entries - doomed // 2
            answer: list[int] = []
            evictor = threading.Thread(target=evict, args=(live, budget, answer))
            evictor.start()
            wait_until(fewer_blobs(blobs, namespace, threshold), timeout=60, interval=0.001)
            server.kill(live)
            evictor.join(timeout=60)
            left = blobs.count(namespace)
            outcomes["killed mid-way" if entries - doomed < left else "killed after the blobs"] += 1
            if answer:
                outcomes["answered before the kill"] += 1
    print(
        f"\n{deployment.database}-{deployment.storage}, 1 worker: {EVICTION_ROUNDS} SIGKILLs "
        f"during eviction of {entries} entries; {dict(outcomes)}; gc removed {orphans} orphans"
    )
    assert outcomes["killed mid-way"] >= 1


def evict(server: LiveServer, budget: dict[str, object], answer: list[int]) -> None:
    try:
        response = httpx.post(f"{server.url}/admin/evict", json=budget, timeout=60)
    except httpx.TransportError:
        return
    answer.append(response.status_code)
