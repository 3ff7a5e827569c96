"""Benchmark: reindex speed and signed-URL hand-out speed on the production backends.

Prints figures measured in one run on this machine (no pass/fail):
  - reindex: blobs per second rebuilt into an empty index, for each store (local directory, GCS emulator)
    and each database (SQLite, this machine's PostgreSQL);
  - signed URLs: keys per second answered by ``POST /v1/namespaces/{ns}/urls`` (GCS emulator, a throwaway
    service-account key), against the same keys streamed through ``POST .../bundle``.

    .venv/bin/python bench/production.py [--blobs 5000] [--keys 2000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient
from google.oauth2 import service_account

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cache_server.admin.reindex import Reindexer
from cache_server.app import create_app
from cache_server.index import Database, EntryRepository
from cache_server.index.migrate import downgrade, upgrade
from cache_server.settings import Settings
from cache_server.storage.base import BlobStore
from cache_server.storage.gcs import GcsBlobStore
from cache_server.storage.local import LocalBlobStore
from cache_server.wiring import build_services
from tests.support.databases import fresh_database_url
from tests.support.gcs_emulator import create_bucket, run_fake_gcs


def fill(store: BlobStore, count: int) -> None:
    for i in range(count):
        data = os.urandom(2048)
        digest = hashlib.sha256(data).hexdigest()
        meta = {"namespace": "bench", "key": str(i), "sha256": digest, "created": "2024-01-01T00:00:00+00:00"}
        store.put(f"bench/{i}", [data], meta)


def time_reindex(store: BlobStore, database: str, tmp: Path) -> float:
    with fresh_database_url(database, tmp) as url:
        settings = Settings(data_dir=tmp / "data", database_url=url)
        upgrade(settings)
        index = Database.from_settings(settings)
        reindexer = Reindexer(EntryRepository(index), store)
        start = time.perf_counter()
        report = reindexer.run()
        elapsed = time.perf_counter() - start
        assert report.added == report.blobs, report.summary()
        downgrade(settings, "base")
        index.dispose()
        return elapsed


def signing_credentials() -> service_account.Credentials:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    info = {
        "type": "service_account",
        "project_id": "bench",
        "private_key_id": "bench-1",
        "private_key": pem,
        "client_email": "bench@bench.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "http://127.0.0.1:9/token",
    }
    return service_account.Credentials.from_service_account_info(
        info, scopes=["https://www.googleapis.com/auth/devstorage.read_write"], always_use_jwt_access=True
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blobs", type=int, default=5000, help="blobs to reindex per store")
    parser.add_argument("--keys", type=int, default=2000, help="keys per signed-URL request")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, run_fake_gcs() as endpoint:
        tmp = Path(scratch)
        stores: dict[str, BlobStore] = {
            "local": LocalBlobStore(tmp / "blobs"),
            "gcs-emulator": GcsBlobStore(create_bucket(endpoint), "bench", endpoint=endpoint),
        }
        for name, store in stores.items():
            fill(store, args.blobs)
            for database in ("sqlite", "postgresql"):
                elapsed = time_reindex(store, database, tmp / f"{name}-{database}")
                rate = args.blobs / elapsed
                print(f"reindex {name:>12} -> {database:<10}: {rate:8.0f} blobs/s ({elapsed:.2f} s)")

        bucket = create_bucket(endpoint)
        settings = Settings(data_dir=tmp / "urls", storage_url=f"gs://{bucket}/b", signed_url_seconds=300)
        upgrade(settings)
        store = GcsBlobStore(bucket, "b", endpoint=endpoint, credentials=signing_credentials())
        fill(store, args.keys)
        services = build_services(settings, store=store)
        services.reindexer.run()
        keys = [str(i) for i in range(args.keys)]
        with TestClient(create_app(settings, services)) as client:
            start = time.perf_counter()
            body = client.post("/v1/namespaces/bench/urls", json={"keys": keys}).json()
            urls_s = time.perf_counter() - start
            assert len(body["urls"]) == args.keys
            start = time.perf_counter()
            bundle = client.post("/v1/namespaces/bench/bundle", json={"keys": keys})
            bundle_s = time.perf_counter() - start
            assert bundle.status_code == 200
        print(f"signed URLs: {args.keys / urls_s:8.0f} keys/s ({urls_s:.2f} s for {args.keys})")
        print(
            f"bundle     : {args.keys / bundle_s:8.0f} keys/s ({bundle_s:.2f} s for {args.keys}, 2 KiB each)"
        )


if __name__ == "__main__":
    main()
