"""Benchmark: the answers to an incident at scale, ``purge-signer`` of a leaked key, ``purge-token`` of a
leaked token and deleting a namespace, each of 100,000 entries, on the index backend given and the local
store.

Prints figures measured in one run on this machine (no pass/fail). Setup (writing the blobs and rows) is
not measured; blobs are written by the real local store with fsync skipped, to set up faster. Each removal
runs as the CLI drives it: bounded rounds (``max_entries`` each) until none remain.

    .venv/bin/python bench/incident.py [--entries 100000] [--database-url postgresql://...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.scratch import scratch_arguments, scratch_services
from cache_server.admin.eviction import EvictionResult
from cache_server.auth.tokens import Role
from cache_server.index.entries import EntryRecord, EntryRepository
from cache_server.index.namespaces import NamespaceRepository
from cache_server.storage.base import blob_name
from cache_server.wiring import Services

SIGNER = "0123456789abcdef"
ROUND = 10_000  # entries per call, as the CLI asks (xla_cache.cli.common.REMOVAL_ROUND)
SIZE = 256


def populate(
    services: Services, namespace: str, entries: int, *, signer: str | None, stored_by: str | None = None
) -> None:
    """``entries`` entries in ``namespace`` (signed by ``signer``, stored by the token id ``stored_by``),
    blobs and rows, loaded in bulk."""
    data = b"x" * SIZE
    digest = hashlib.sha256(data).hexdigest()
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)
    records = []
    with mock.patch("os.fsync"):  # setup only: the blobs are real files in the real layout
        for i in range(entries):
            key = f"{i:012d}"
            services.store.put(blob_name(namespace, key), [data], {"sha256": digest})
            records.append(
                EntryRecord(
                    namespace,
                    key,
                    SIZE,
                    digest,
                    created_at=start + dt.timedelta(milliseconds=i),
                    stored_by=stored_by,
                    signer=signer,
                    signature=None if signer is None else f"{signer}:AAAA",
                )
            )
    repository = EntryRepository(services.database)
    NamespaceRepository(services.database).upsert_namespace(namespace, {}, {}, now=start)
    for start_at in range(0, len(records), 5000):  # with their change feed rows, as uploads write them
        repository.record_new_entries(records[start_at : start_at + 5000])


def timed_rounds(call: Callable[[], EvictionResult], what: str) -> tuple[int, float, int]:
    """Call until nothing remains, as the CLI does; returns the calls, the seconds and the entries removed."""
    rounds = removed = 0
    start = time.perf_counter()
    while True:
        result = call()
        rounds += 1
        removed += result.evicted
        print(
            f"  {what}: {removed} removed, {result.remaining} remaining, {time.perf_counter() - start:.1f} s"
        )
        if not result.remaining:
            return rounds, time.perf_counter() - start, removed


def main() -> None:
    parser = argparse.ArgumentParser()
    scratch_arguments(parser)
    args = parser.parse_args()
    with scratch_services(args.database_url) as services:
        admin = services.admin
        start = time.perf_counter()
        populate(services, "leaked", args.entries, signer=SIGNER)
        populate(services, "doomed", args.entries, signer=None)
        _, leaked_token = services.tokens.create("leaked-ci", Role.WRITE)
        populate(services, "poisoned", args.entries, signer=None, stored_by=leaked_token.id)
        print(f"setup: 3 x {args.entries} entries of {SIZE} B ({time.perf_counter() - start:.1f} s)")
        rounds, seconds, removed = timed_rounds(
            lambda: services.evictor.remove_signed_by(SIGNER, max_entries=ROUND), "leaked"
        )
        print(f"purge-signer of {removed} entries: {seconds:.1f} s in {rounds} calls of {ROUND}")
        rounds, seconds, removed = timed_rounds(
            lambda: admin.purge_token("leaked-ci", max_entries=ROUND).removed, "poisoned"
        )
        print(f"purge-token of {removed} entries: {seconds:.1f} s in {rounds} calls of {ROUND}")
        rounds, seconds, removed = timed_rounds(
            lambda: admin.delete_namespace("doomed", max_entries=ROUND), "doomed"
        )
        print(f"delete namespace of {removed} entries: {seconds:.1f} s in {rounds} calls of {ROUND}")
        left = sum(1 for _ in services.store.list())
        held = {ns: n for ns, (n, _) in admin.stored_by_namespace().items() if n}
        assert left == 0 and not held, (left, held)


if __name__ == "__main__":
    main()
