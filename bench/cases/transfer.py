"""Moving a cache directory: the tar floor, ``xla-cache push``, ``warm()``, and a fleet warming at once."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.synchronize
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from unittest import mock

from bench import clientops
from bench.core import MB, CaseResult, Context, Series, case, fresh
from bench.data import CacheDir
from bench.launch import LiveServer, run_server, wait_quiet

PUSH_LIMIT = 5.0  # push <= 5x the tar floor
WARM_LIMIT = 2.0  # warm <= 2x the tar floor
FLEET_LIMIT = 2.0  # 64 clients <= 2x (one client's time x 64 / workers)


def _work(cache: CacheDir) -> dict[str, float]:
    return {"entries": len(cache.keys), "MB": cache.total_bytes / MB}


def tar_copy(source: Path, destination: Path) -> None:
    """``tar -C source -cf - . | tar -C destination -xf -``."""
    writer = subprocess.Popen(["tar", "-C", str(source), "-cf", "-", "."], stdout=subprocess.PIPE)
    assert writer.stdout is not None
    reader = subprocess.run(["tar", "-C", str(destination), "-xf", "-"], stdin=writer.stdout, check=False)
    writer.stdout.close()
    if writer.wait() != 0 or reader.returncode != 0:
        raise RuntimeError(f"tar failed: {writer.returncode}, {reader.returncode}")


def timed_tar_copy(source: Path, target: Path) -> float:
    """Seconds of :func:`tar_copy` from ``source`` into ``target`` made empty, after ``sync`` (not timed)."""
    fresh(target)
    os.sync()
    started = time.perf_counter()
    tar_copy(source, target)
    return time.perf_counter() - started


def in_turns(
    ctx: Context,
    data: CacheDir,
    runs: Sequence[tuple[str, Callable[[], object], str]],
    *,
    setup: Callable[[], object],
    server: LiveServer,
) -> tuple[list[Series], Series]:
    """Time tar's copy of the same directory and each of ``runs`` (label, run, the client's
    ``XLA_CACHE_COMPRESSION`` for it) in turns, repetition by repetition: the series of each run, and the
    floor timed beside them.

    The disk's cost of creating a file swings by 10x or more within minutes on this machine (Machine, in
    BENCHMARKS.md); a floor measured once at the start of a run and an operation timed minutes later can
    meet different disks, and their ratio then says more about the disk than about the software. Each
    timed step starts after ``sync`` and once ``server`` is quiet (a push leaves it parsing graphs for a
    while); the runs' order rotates from one repetition to the next, because whatever runs right after
    tar's copy was measured up to 30% slower than the same run in second place."""
    target = ctx.tmpdir("floor-in-turns")
    series = [Series(label, work=_work(data)) for label, _, _ in runs]
    floor = Series("tar c | tar x, in turns", work=_work(data))
    for repetition in range(ctx.reps):
        wait_quiet(server.pid)
        floor.seconds.append(timed_tar_copy(data.directory, target))
        first = repetition % len(runs)
        for index in [*range(first, len(runs)), *range(first)]:
            _, run, compression = runs[index]
            wait_quiet(server.pid)
            setup()
            os.sync()
            with _compression(compression):
                started = time.perf_counter()
                run()
                series[index].seconds.append(time.perf_counter() - started)
    return series, floor


@case(
    "tar-floor",
    "tar c | tar x of the cache directory on the same disk (push and warm time it again, in turns with "
    "themselves, for their ratios)",
)
def tar_floor(ctx: Context, result: CaseResult) -> None:
    data = ctx.dataset()
    result.notes.append(ctx.dataset_note())
    target = ctx.tmpdir("tar-copy")
    result.add(
        ctx.repeat(
            "tar c | tar x",
            lambda: tar_copy(data.directory, target),
            setup=lambda: fresh(target),
            work=_work(data),
        )
    )
    # Not a floor of the targets, but of any store that keeps what it acknowledged: the server's local
    # store fsyncs each blob and its directory before it answers.
    result.add(
        ctx.repeat(
            "durable copy (fsync per file and directory)",
            lambda: durable_copy(data, target),
            setup=lambda: fresh(target),
            work=_work(data),
        )
    )


def durable_copy(cache: CacheDir, destination: Path) -> None:
    """Copy every entry as a durable store would: write, fsync the file, then fsync the directory."""
    directory = os.open(destination, os.O_RDONLY)
    try:
        for key in cache.keys:
            data = (cache.directory / key).read_bytes()
            fd = os.open(destination / key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.fsync(directory)
    finally:
        os.close(directory)


@contextlib.contextmanager
def _compression(setting: str) -> Iterator[None]:
    """The client's ``XLA_CACHE_COMPRESSION`` (by default it compresses uploads, and asks a loopback
    server for plain bundles)."""
    with mock.patch.dict(os.environ, {"XLA_CACHE_COMPRESSION": setting}):
        yield


@case(
    "push",
    "xla-cache push of the cache directory into an empty namespace",
    prepare=Context.start_server,
)
def push(ctx: Context, result: CaseResult) -> None:
    data = ctx.dataset()
    result.notes.append(ctx.dataset_note())
    timeout = ctx.pick(120.0, 600.0)
    variants = ctx.tmpdir("push-variants")
    pending: list[CacheDir] = []
    outcomes: list[clientops.PushOutcome] = []

    def setup() -> None:  # a namespace of its own per repetition: the same files, hard-linked
        pending.append(data.variant(len(outcomes) + len(pending) + 1, variants))

    def run() -> None:
        outcomes.append(clientops.push(server.url, pending.pop(), timeout=timeout))

    server = ctx.server()
    runs = [("xla-cache push", run, "auto"), ("xla-cache push, uncompressed", run, "off")]
    (series, plain), floor = in_turns(ctx, data, runs, setup=setup, server=server)
    for added in (series, plain, floor):
        result.add(added)
    errors = [e for o in outcomes for e in o.errors]
    if errors or any(o.uploaded != len(data.keys) for o in outcomes):
        result.error = f"push incomplete: uploaded {[o.uploaded for o in outcomes]}; {errors[:3]}"
    ratio = series.median / floor.median
    result.figures["ratio_to_tar_floor"] = ratio
    result.target(
        f"push <= {PUSH_LIMIT:g}x the tar floor",
        ratio,
        PUSH_LIMIT,
        at_most=True,
        fmt="{:.1f}x",
        why=f"{series.median:.2f} s against tar's {floor.median:.2f} s, timed in turns",
    )


@case(
    "warm",
    "warm() of the namespace into an empty directory",
    prepare=Context.start_server,
)
def warm(ctx: Context, result: CaseResult) -> None:
    data = ctx.dataset()
    result.notes.append(ctx.dataset_note())
    timeout = ctx.pick(120.0, 600.0)
    destination = ctx.tmpdir("warm-into")
    outcomes: list[clientops.WarmOutcome] = []
    ctx.ensure_pushed(data)
    url = ctx.server().url

    def run() -> None:
        outcomes.append(clientops.warm(url, data, destination, timeout=timeout))

    runs = [("warm()", run, "auto"), ("warm(), zstd on", run, "on")]
    (series, compressed), floor = in_turns(
        ctx, data, runs, setup=lambda: fresh(destination), server=ctx.server()
    )
    for added in (series, compressed, floor):
        result.add(added)
    bad = [o for o in outcomes if o.errors or o.downloaded != len(data.keys)]
    if bad:
        result.error = f"warm incomplete: {[o.downloaded for o in bad]}; {bad[0].errors[:3]}"
    if "torch_xla" in sys.modules:
        result.notes.append("torch_xla was imported during the case")
    ratio = series.median / floor.median
    result.figures["ratio_to_tar_floor"] = ratio
    result.target(
        f"warm <= {WARM_LIMIT:g}x the tar floor",
        ratio,
        WARM_LIMIT,
        at_most=True,
        fmt="{:.1f}x",
        why=f"{series.median:.2f} s against tar's {floor.median:.2f} s, timed in turns",
    )


def _fleet_client(
    url: str,
    cache: CacheDir,
    destination: Path,
    timeout: float,
    start: multiprocessing.synchronize.Event,
    results: multiprocessing.Queue[tuple[float, int, list[str]]],
) -> None:
    start.wait()
    began = time.perf_counter()
    try:
        outcome = clientops.warm(url, cache, destination, timeout=timeout)
        results.put((time.perf_counter() - began, outcome.downloaded, outcome.errors))
    except Exception as exc:  # reported, never hidden
        results.put((time.perf_counter() - began, 0, [f"{type(exc).__name__}: {exc}"]))


def fleet_run(url: str, cache: CacheDir, destinations: list[Path], timeout: float) -> tuple[float, list[str]]:
    """Warm into every destination at once, one forked process each; (seconds until all done, errors)."""
    context = multiprocessing.get_context("fork")  # forked after the imports: clients start at once
    start = context.Event()
    results: multiprocessing.Queue[tuple[float, int, list[str]]] = context.Queue()
    processes = [
        context.Process(target=_fleet_client, args=(url, cache, d, timeout, start, results), daemon=True)
        for d in destinations
    ]
    for process in processes:
        process.start()
    time.sleep(0.2)
    began = time.perf_counter()
    start.set()
    outcomes = [results.get(timeout=timeout + 60) for _ in processes]
    seconds = time.perf_counter() - began
    for process in processes:
        process.join(timeout=30)
    errors = [f"client {i}: {'; '.join(errs)}" for i, (_, _, errs) in enumerate(outcomes) if errs]
    errors += [
        f"client {i} downloaded {count} of {len(cache.keys)}"
        for i, (_, count, errs) in enumerate(outcomes)
        if count != len(cache.keys) and not errs
    ]
    return seconds, errors


FLEET_WORKERS = 2


def _start_fleet_server(ctx: Context) -> None:
    ctx.start("fleet-server", lambda: run_server(ctx.tmpdir("fleet-server"), workers=FLEET_WORKERS))


@case(
    "fleet",
    "many clients warming the same namespace at once from a 2-worker server",
    prepare=_start_fleet_server,
)
def fleet(ctx: Context, result: CaseResult) -> None:
    clients = ctx.pick(8, 64)
    workers = FLEET_WORKERS
    count = ctx.pick(100, 500)
    data = ctx.dataset()
    cache = data.variant(900, ctx.tmpdir("fleet-data"), count=count)
    timeout = ctx.pick(120.0, 600.0)
    result.notes.append(
        f"{clients} forked client processes, {len(cache.keys)} entries ({cache.total_bytes / MB:.1f} MB) "
        f"each, server --workers {workers}; clients and server share this machine's CPUs"
    )
    base = ctx.tmpdir("fleet-into")
    errors: list[str] = []
    dirs: list[Path] = []

    def setup(n: int) -> None:
        fresh(base)
        dirs[:] = [base / f"client-{i}" for i in range(n)]

    def run() -> None:
        _, errs = fleet_run(server.url, cache, dirs, timeout)
        errors.extend(errs)

    ctx.wait_started()  # no thread may be starting anything while the clients are forked
    server = ctx.started("fleet-server", lambda: run_server(ctx.tmpdir("fleet-server"), workers=workers))
    pushed = clientops.push(server.url, cache, timeout=timeout)
    if pushed.uploaded != len(cache.keys):
        raise RuntimeError(f"setup push stored {pushed.uploaded}: {pushed.errors[:3]}")
    one = result.add(ctx.repeat("1 client", run, setup=lambda: setup(1), work=_work(cache)))
    many = result.add(
        ctx.repeat(
            f"{clients} clients",
            run,
            setup=lambda: setup(clients),
            work={k: v * clients for k, v in _work(cache).items()},
        )
    )
    # What compressing every bundle costs the server when a fleet asks for it (the client asks a loopback
    # server for plain bundles unless XLA_CACHE_COMPRESSION=on): the same warms, zstd bundles.
    with _compression("on"):
        result.add(
            ctx.repeat(
                f"{clients} clients, zstd bundles",
                run,
                setup=lambda: setup(clients),
                work={k: v * clients for k, v in _work(cache).items()},
            )
        )
    result.figures["failed_warms"] = len(errors)
    result.figures["warms"] = (1 + 2 * clients) * ctx.reps
    if errors:
        result.notes.append(f"failed warms: {len(errors)}; first: {errors[0]}")
    expected = one.median * clients / workers
    ratio = many.median / expected
    result.figures["expected_s"] = expected
    result.figures["ratio"] = ratio
    result.target(
        "fleet: no errors",
        float(len(errors)),
        0,
        at_most=True,
        fmt="{:.0f} failed warms",
        why=f"of {clients} clients x {ctx.reps} repetitions, twice (and {ctx.reps} single-client warms)",
    )
    result.target(
        f"fleet: {clients} clients <= {FLEET_LIMIT:g}x (one client x {clients} / {workers} workers)",
        ratio,
        FLEET_LIMIT,
        at_most=True,
        fmt="{:.2f}x",
        why=f"{many.median:.2f} s against {one.median:.3f} s x {clients} / {workers} = {expected:.2f} s",
    )
