"""``python -m bench.breakdown``: where the time of a push and of a warm goes, part by part.

    python -m bench.breakdown                        # scratch under the system's temporary directory
    python -m bench.breakdown --scratch /dev/shm/b   # on tmpfs: the software's own costs, no disk
    python -m bench.breakdown --reps 7 --json parts.json

It builds the same data set as ``python -m bench`` (2,000 entries of 5-60 kB; ``--quick``: 300), starts one
server (one worker, SQLite, local blobs), and prints medians of:

- the floors: ``tar c | tar x`` of the directory; the client's own parts of a warm done alone in Python
  (SHA-256 of every entry; creating, writing and renaming every file; reading the tar stream of them);
- a push: wall time, this process's CPU and the server process's own CPU until the push returns, and the
  CPU of the server's children (its graph parser; multiprocessing's resource tracker, which uses next to
  none) from the push's start until they and the server are quiet again;
- a warm (after the server is quiet): wall time, this process's CPU, the server's CPU, and when each step
  of the conversation first ended, counted from the start: registering the namespace, the manifest, the
  bundle's answer (its headers), its first byte and its last byte (of the last bundle, when several
  stream at once); and the client's waits for the bundle's pieces: how many it read, their sum, and the
  sum and count of those over 2 ms (the rest is the client's own receiving, not the server falling
  behind);
- the same bundle read by a bare client that keeps nothing: wall time, its CPU and the server's (the
  server's pace alone).

Like ``python -m bench``, it times nothing of its setup, and it prints figures, not verdicts.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx

from bench import clientops
from bench.cases.transfer import tar_copy
from bench.core import Context, fresh
from bench.data import CacheDir
from bench.launch import children_of, own_cpu, process_cpu, wait_quiet
from cache_protocol.tar import BLOCK, END, TarReader, member_header, padding

LONG_WAIT = 0.002
"""A wait for the next piece of a bundle longer than this is counted apart: the server behind, not the
client's own receiving (about 60 us a piece of 64 KiB on the recorded machine)."""


class Phases:
    """Seconds from the start of a warm at which its server steps ended, from wrapped ``CacheApi`` calls,
    and the client's waits for the pieces of its bundles."""

    def __init__(self) -> None:
        self.started = 0.0
        self.marks: dict[str, float] = {}
        self.waits: list[float] = []

    def mark(self, name: str, *, last: bool = False) -> None:
        seconds = time.perf_counter() - self.started
        if last:
            self.marks[name] = seconds
        else:
            self.marks.setdefault(name, seconds)

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        from xla_cache.http.api import CacheApi

        register, manifest, bundle = CacheApi.register_namespace, CacheApi.manifest, CacheApi.bundle

        def timed(method: Callable[..., Any], name: str) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                try:
                    return method(*args, **kwargs)
                finally:
                    self.mark(name)

            return call

        @contextlib.contextmanager
        def timed_bundle(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with bundle(*args, **kwargs) as (response, chunks):
                self.mark("bundle answered")

                def counted() -> Iterator[bytes]:
                    while True:  # the reader stops at the tar's end, before the stream's
                        asked = time.perf_counter()
                        chunk = next(chunks, None)
                        self.waits.append(time.perf_counter() - asked)
                        if chunk is None:
                            return
                        self.mark("bundle first byte")
                        self.mark("bundle last byte", last=True)
                        yield chunk

                yield response, counted()

        with (
            mock.patch.object(CacheApi, "register_namespace", timed(register, "registered")),
            mock.patch.object(CacheApi, "manifest", timed(manifest, "manifest")),
            mock.patch.object(CacheApi, "bundle", timed_bundle),
        ):
            yield


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def client_floor(data: CacheDir, target: Path) -> dict[str, float]:
    """The client's own parts of a warm, each done alone over the data set: seconds."""
    blobs = [(key, (data.directory / key).read_bytes()) for key in data.keys]
    parts: dict[str, float] = {}
    started = time.perf_counter()
    for _, blob in blobs:
        hashlib.sha256(blob).hexdigest()
    parts["sha256 of every entry"] = time.perf_counter() - started

    fresh(target)
    os.sync()
    started = time.perf_counter()
    for number, (key, blob) in enumerate(blobs):
        temp = os.path.join(target, f".{key}.{number:x}.part")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, blob)
        os.close(fd)
        os.replace(temp, os.path.join(target, key))
    parts["create, write, rename every file"] = time.perf_counter() - started

    stream = io.BytesIO()
    for key, blob in blobs:
        stream.write(member_header(key, len(blob), records={"XLA.sha256": "0" * 64}))
        stream.write(blob)
        if len(blob) % BLOCK:
            stream.write(padding(len(blob)))
    stream.write(END)
    body = stream.getvalue()
    pieces = iter([body[i : i + 65536] for i in range(0, len(body), 65536)])
    started = time.perf_counter()
    for member in TarReader(lambda _size: next(pieces, b"")).members():
        for _ in member.chunks():
            pass
    parts["read the tar stream (64 kB pieces)"] = time.perf_counter() - started
    return parts


def measure(ctx: Context, reps: int) -> dict[str, Any]:
    data = ctx.dataset()
    server = ctx.server()
    figures: dict[str, Any] = {"data": ctx.dataset_note(), "scratch": str(ctx.scratch)}

    target = ctx.tmpdir("floor")
    tar_runs: list[float] = []
    floors: dict[str, list[float]] = {}
    for _ in range(reps):
        fresh(target)
        os.sync()
        started = time.perf_counter()
        tar_copy(data.directory, target)
        tar_runs.append(time.perf_counter() - started)
        for part, seconds in client_floor(data, target).items():
            floors.setdefault(part, []).append(seconds)
    figures["tar c | tar x"] = median(tar_runs)
    figures["client parts alone"] = {part: median(runs) for part, runs in floors.items()}

    push_runs: dict[str, list[float]] = {"wall": [], "client CPU": [], "server CPU": [], "parser CPU": []}
    variants = ctx.tmpdir("push-variants")
    for number in range(1, reps + 1):
        cache = data.variant(number, variants)
        os.sync()
        parsers = children_of(server.pid)
        parser_before = sum(process_cpu(p) for p in parsers)
        cpu, server_cpu, started = own_cpu(), process_cpu(server.pid), time.perf_counter()
        outcome = clientops.push(server.url, cache, timeout=600)
        push_runs["wall"].append(time.perf_counter() - started)
        push_runs["client CPU"].append(own_cpu() - cpu)
        push_runs["server CPU"].append(process_cpu(server.pid) - server_cpu)
        if outcome.uploaded != len(cache.keys):
            raise SystemExit(f"push stored {outcome.uploaded} of {len(cache.keys)}: {outcome.errors[:3]}")
        wait_quiet(server.pid)
        push_runs["parser CPU"].append(sum(process_cpu(p) for p in children_of(server.pid)) - parser_before)
    figures["push"] = {name: median(runs) for name, runs in push_runs.items()}

    ctx.ensure_pushed(data)
    wait_quiet(server.pid)  # the warms run alone, not beside the parsing of what was just pushed
    destination = ctx.tmpdir("warm-into")
    warm_runs: dict[str, list[float]] = {"wall": [], "client CPU": [], "server CPU": []}
    marks: dict[str, list[float]] = {}
    waits: dict[str, list[float]] = {}
    phases = Phases()
    for _ in range(reps):
        fresh(destination)
        os.sync()
        phases.marks, phases.waits = {}, []
        with phases.watching():
            cpu, server_cpu = own_cpu(), process_cpu(server.pid)
            phases.started = time.perf_counter()
            warmed = clientops.warm(server.url, data, destination, timeout=600)
            warm_runs["wall"].append(time.perf_counter() - phases.started)
            warm_runs["client CPU"].append(own_cpu() - cpu)
            warm_runs["server CPU"].append(process_cpu(server.pid) - server_cpu)
        if warmed.downloaded != len(data.keys) or warmed.errors:
            raise SystemExit(f"warm placed {warmed.downloaded} of {len(data.keys)}: {warmed.errors[:3]}")
        for name, seconds in phases.marks.items():
            marks.setdefault(name, []).append(seconds)
        long_waits = [seconds for seconds in phases.waits if seconds > LONG_WAIT]
        for name, value in (
            ("pieces read", len(phases.waits)),
            ("all waits", sum(phases.waits)),
            ("waits over 2 ms", sum(long_waits)),
            ("how many over 2 ms", len(long_waits)),
        ):
            waits.setdefault(name, []).append(value)
    figures["warm"] = {name: median(runs) for name, runs in warm_runs.items()}
    figures["warm steps ended at"] = {name: median(runs) for name, runs in marks.items()}
    figures["warm's waits for bundle pieces"] = {name: median(runs) for name, runs in waits.items()}
    figures["bundle to a bare reader"] = bare_reader(server.url, data, reps, server.pid)
    return figures


def bare_reader(url: str, data: CacheDir, reps: int, server_pid: int) -> dict[str, float]:
    """The namespace's bundle read by a client that keeps nothing: the server's pace alone (medians)."""
    runs: dict[str, list[float]] = {"wall": [], "client CPU": [], "server CPU": []}
    with httpx.Client(base_url=url, timeout=600) as http:
        path = f"/v1/namespaces/{data.namespace}"
        keys = [entry["key"] for entry in http.get(f"{path}/manifest").raise_for_status().json()["entries"]]
        for _ in range(reps):
            cpu, server_cpu, started = own_cpu(), process_cpu(server_pid), time.perf_counter()
            headers = {"Accept-Encoding": "identity"}
            with http.stream("POST", f"{path}/bundle", json={"keys": keys}, headers=headers) as response:
                response.raise_for_status()
                for _ in response.iter_bytes():
                    pass
            runs["wall"].append(time.perf_counter() - started)
            runs["client CPU"].append(own_cpu() - cpu)
            runs["server CPU"].append(process_cpu(server_pid) - server_cpu)
    return {name: median(values) for name, values in runs.items()}


def print_figures(figures: dict[str, Any]) -> None:
    print(f"{figures['data']}; scratch {figures['scratch']}")
    print(f"tar c | tar x: {figures['tar c | tar x'] * 1000:.0f} ms")
    for title in (
        "client parts alone",
        "push",
        "warm",
        "warm steps ended at",
        "warm's waits for bundle pieces",
        "bundle to a bare reader",
    ):
        print(f"{title}:")
        for name, value in figures[title].items():
            if name in ("pieces read", "how many over 2 ms"):
                print(f"  {name:<40} {value:8.0f}")
            else:
                print(f"  {name:<40} {value * 1000:8.0f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.breakdown", description=__doc__.split("\n")[0])
    parser.add_argument("--scratch", type=Path, help="where the data, the server and the copies go")
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each (default 5; medians)")
    parser.add_argument("--quick", action="store_true", help="300 entries instead of 2,000")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        if args.scratch is None:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="xla-cache-breakdown-")))
        else:
            scratch = args.scratch
            scratch.mkdir(parents=True, exist_ok=True)
        ctx = Context(quick=args.quick, reps=args.reps, scratch=scratch, options={})
        stack.callback(ctx.close)
        figures = measure(ctx, max(1, args.reps))
    print_figures(figures)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
