"""Benchmark: how fast entries go in and out of a real server process.

Prints figures and ratios measured in one run on this machine (no pass/fail):
  - many small entries: one GET each (sequential, and 8 in parallel) against one bundle stream;
  - one large entry: upload and download throughput.

    .venv/bin/python bench/server_throughput.py [--small 2000] [--small-size 65536] [--large-mib 512]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cache_protocol import SHA256_HEADER
from tests.support.api import put
from tests.support.server import run_server

MIB = 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=2000, help="number of small entries")
    parser.add_argument("--small-size", type=int, default=64 * 1024, help="bytes per small entry")
    parser.add_argument("--large-mib", type=int, default=512, help="size of the large entry in MiB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, run_server(Path(tmp)) as server:
        ns = f"{server.url}/v1/namespaces/bench"
        blobs = {str(i): os.urandom(args.small_size) for i in range(args.small)}
        with httpx.Client(base_url=server.url, timeout=300) as client:
            start = time.perf_counter()
            for key, data in blobs.items():
                put(client, "bench", key, data)
            put_s = time.perf_counter() - start
            total = args.small * args.small_size

            start = time.perf_counter()
            for key in blobs:
                client.get(f"{ns}/entries/{key}").raise_for_status()
            get_s = time.perf_counter() - start

            def fetch(key: str) -> None:
                client.get(f"{ns}/entries/{key}").raise_for_status()

            start = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(fetch, blobs))
            par_s = time.perf_counter() - start

            start = time.perf_counter()
            with (
                client.stream("POST", f"{ns}/bundle", json={"keys": list(blobs)}) as response,
                tarfile.open(fileobj=_Stream(response), mode="r|") as tar,
            ):
                count = sum(1 for member in tar if tar.extractfile(member) is not None)
            bundle_s = time.perf_counter() - start
            assert count == args.small

            print(f"small entries: {args.small} x {args.small_size} B ({total / MIB:.0f} MiB)")
            print(f"  PUT one by one        {put_s:7.2f} s  {args.small / put_s:8.0f} entries/s")
            print(f"  GET one by one        {get_s:7.2f} s  {args.small / get_s:8.0f} entries/s")
            print(f"  GET 8 in parallel     {par_s:7.2f} s  {args.small / par_s:8.0f} entries/s")
            print(f"  one bundle stream     {bundle_s:7.2f} s  {args.small / bundle_s:8.0f} entries/s")
            print(
                f"  bundle vs sequential GETs: {get_s / bundle_s:.1f}x faster; "
                f"vs parallel: {par_s / bundle_s:.1f}x"
            )

            size = args.large_mib * MIB
            block = os.urandom(MIB)
            digest = hashlib.sha256()
            for _ in range(args.large_mib):
                digest.update(block)
            start = time.perf_counter()
            client.put(
                f"{ns}/entries/large",
                content=(block for _ in range(args.large_mib)),
                headers={SHA256_HEADER: digest.hexdigest(), "Content-Length": str(size)},
            ).raise_for_status()
            up_s = time.perf_counter() - start
            start = time.perf_counter()
            with client.stream("GET", f"{ns}/entries/large") as response:
                received = sum(len(chunk) for chunk in response.iter_bytes(MIB))
            down_s = time.perf_counter() - start
            assert received == size
            print(f"large entry: {args.large_mib} MiB")
            print(f"  upload   {up_s:6.2f} s  {args.large_mib / up_s:7.0f} MiB/s")
            print(f"  download {down_s:6.2f} s  {args.large_mib / down_s:7.0f} MiB/s")


class _Stream:
    """A file-like view of a streaming httpx response, for tarfile's stream mode."""

    def __init__(self, response: httpx.Response) -> None:
        self._chunks = response.iter_bytes(MIB)
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            try:
                self._buffer += next(self._chunks)
            except StopIteration:
                break
        if size < 0:
            size = len(self._buffer)
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out


if __name__ == "__main__":
    main()
