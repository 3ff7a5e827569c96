"""The server on Cloud Storage 30 ms away: pushing and warming small entries (fake-gcs-server behind a
latency-adding proxy)."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from bench import clientops
from bench.cases.transfer import timed_tar_copy
from bench.core import MB, CaseResult, Context, Series, case, fresh
from bench.data import CacheDir
from bench.launch import (
    LiveServer,
    children_of,
    own_cpu,
    process_cpu,
    run_server,
    wait_quiet,
)
from bench.proxy import latency_proxy_process
from tests.support.gcs_emulator import create_bucket, fake_gcs_process

DELAY = 0.030
WARM_LIMIT = 1.0  # seconds for 2,000 entries (issue 45; was 2)
PUSH_LIMIT = 5.0
FULL_COUNT = 2000


def _cpu(pid: int | None) -> float:
    """CPU seconds used so far by process ``pid`` and its children (this process alone when None)."""
    if pid is None:
        return own_cpu()
    return process_cpu(pid) + sum(process_cpu(child) for child in children_of(pid))


@case("gcs-latency", "push and warm of small entries with the blobs in GCS 30 ms away (emulator + proxy)")
def gcs_latency(ctx: Context, result: CaseResult) -> None:
    count = ctx.pick(20, FULL_COUNT)
    timeout = float(ctx.options.get("gcs_timeout") or ctx.pick(60.0, 300.0))
    data = ctx.dataset()
    variants = ctx.tmpdir("gcs-variants")
    caches = [data.variant(100 + i, variants, count=count) for i in range(ctx.reps)]
    first = caches[0]
    result.notes.append(
        f"{count} entries ({first.total_bytes / MB:.1f} MB); every GCS request and connection pays "
        f"{DELAY * 1000:.0f} ms; the index is SQLite; timeout {timeout:g} s per push or warm"
    )
    quick_note = "" if count == FULL_COUNT else f"quick run: {count} entries, not {FULL_COUNT}"
    with fake_gcs_process() as emulator, contextlib.ExitStack() as servers:
        port = int(emulator.url.rsplit(":", 1)[1])
        with latency_proxy_process("127.0.0.1", port, DELAY) as proxy:

            def start_server(packs: bool = True, over: LiveServer | None = None) -> LiveServer:
                # A bucket (and server) per push: fake-gcs-server's memory backend scans the whole bucket
                # on every create, so each push into one shared bucket would be slower than the one
                # before it (3.3 s, 7.8 s, 11.8 s of the emulator's CPU), which real GCS is not. ``over``:
                # a second server over that server's bucket and index instead.
                bucket = create_bucket(emulator.url) if over is None else buckets[over.pid]
                env = {
                    "XLA_CACHE_STORAGE_URL": f"gs://{bucket}/bench",
                    "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{proxy.port}",
                    "XLA_CACHE_STORAGE_TIMEOUT": str(timeout),
                    "XLA_CACHE_PACKS": "true" if packs else "false",
                }
                if over is None:
                    data_dirs[bucket] = ctx.tmpdir(f"gcs-server-{bucket}")
                else:
                    env["XLA_CACHE_PACK_INTERVAL_SECONDS"] = "3600"  # packed when the benchmark says
                started = servers.enter_context(run_server(data_dirs[bucket], env=env))
                buckets[started.pid] = bucket
                pushed_to.append(started)
                return started

            buckets: dict[int, str] = {}
            data_dirs: dict[str, Path] = {}
            pushed_to: list[LiveServer] = []
            pushes: list[clientops.PushOutcome] = []
            requests: list[int] = []
            cpu: dict[str, list[float]] = {}

            @contextlib.contextmanager
            def cpu_into(into: dict[str, list[float]], server: LiveServer) -> Iterator[None]:
                # Where the CPU goes: on 2 cores, the emulator's and the proxy's share is the machine's too.
                parts = {
                    "client": None,
                    "server (and its graph parser)": server.pid,
                    "emulator": emulator.pid,
                    "proxy": proxy.pid,
                }
                started = {name: _cpu(pid) for name, pid in parts.items()}
                yield
                for name, pid in parts.items():
                    into.setdefault(name, []).append(_cpu(pid) - started[name])

            def push() -> None:
                before = proxy.requests
                with cpu_into(cpu, pushed_to[-1]):
                    pushes.append(clientops.push(pushed_to[-1].url, caches[len(pushes)], timeout=timeout))
                requests.append(proxy.requests - before)

            push_series = result.add(
                ctx.repeat(
                    "push", push, setup=start_server, work={"entries": count, "MB": first.total_bytes / MB}
                )
            )
            timed_out = [o for o in pushes if o.uploaded + o.already_present < count]
            if timed_out:
                result.notes.append(
                    f"push incomplete in {len(timed_out)} of {len(pushes)} repetitions (timeout "
                    f"{timeout:g} s): uploaded {[o.uploaded for o in pushes]}; {timed_out[0].errors[:2]}"
                )
            result.figures["gcs_requests_per_entry_push"] = sum(requests) / len(requests) / count
            result.figures["push CPU seconds (median)"] = {
                name: statistics.median(seconds) for name, seconds in cpu.items()
            }
            done = [
                (c, srv) for c, srv, o in zip(caches, pushed_to, pushes, strict=False) if o.uploaded == count
            ]
            source, server = done[-1] if done else (None, None)
            warm_series = None
            floor = Series("tar c | tar x of the same entries, before each warm()", work={"entries": count})
            if source is None or server is None:
                result.notes.append("no complete push: warm not measured")
            else:
                destination = ctx.tmpdir("gcs-warm-into")
                warms: list[clientops.WarmOutcome] = []
                # The disk's cost of creating files swings 10x within minutes here (BENCHMARKS.md, Machine):
                # tar's copy of the same entries, timed just before each warm, tells what the disk allowed.
                floor_target = ctx.tmpdir("gcs-floor")

                def with_floor(into: Series, source: CacheDir = source) -> Callable[[], None]:
                    """A warm's setup that times tar's copy of the same entries into ``into`` first."""

                    def setup() -> None:
                        into.seconds.append(timed_tar_copy(source.directory, floor_target))
                        fresh(destination)

                    return setup

                def warms_from(
                    label: str,
                    server: LiveServer,
                    outcomes: list[clientops.WarmOutcome],
                    setup: Callable[[], None] = lambda: fresh(destination),
                ) -> Series:
                    """Warms of ``source`` from ``server``: GCS requests per entry, CPU per process."""
                    made: list[int] = []
                    into: dict[str, list[float]] = {}

                    def warm(source: CacheDir = source) -> None:
                        before = proxy.requests
                        with cpu_into(into, server):
                            outcomes.append(clientops.warm(server.url, source, destination, timeout=timeout))
                        made.append(proxy.requests - before)

                    series = result.add(
                        ctx.repeat(
                            label,
                            warm,
                            setup=setup,
                            work={"entries": count, "MB": source.total_bytes / MB},
                        )
                    )
                    figure = "gcs_requests_per_entry_" + label.replace("()", "").replace(" ", "_")
                    result.figures[figure] = sum(made) / len(made) / count
                    result.figures[f"{label} CPU seconds (median)"] = {
                        name: statistics.median(seconds) for name, seconds in into.items()
                    }
                    return series

                # Each warm once the servers are quiet: a server parses the graphs of what was just pushed
                # (reading each blob from the bucket, through the proxy) for a while after the push.
                for pushed_server in pushed_to:
                    wait_quiet(pushed_server.pid)
                warm_series = warms_from("warm()", server, warms, with_floor(floor))
                result.add(floor)
                bad = [o for o in warms if o.downloaded != count]
                if bad:
                    result.notes.append(
                        f"warm incomplete in {len(bad)} repetitions (timeout {timeout:g} s): "
                        f"{[o.downloaded for o in warms]}; {bad[0].errors[:2]}"
                    )
                    warm_series.note = f"timed out after {timeout:g} s"

                # The same warm from entries pushed with packs off: one GCS request per entry.
                plain = start_server(packs=False)
                pushed = clientops.push(plain.url, source, timeout=timeout)
                if pushed.uploaded == count:
                    wait_quiet(plain.pid)
                    warms_from("warm() without packs", plain, [])
                    # Those entries packed later (as the entries of single PUTs and of the in-job
                    # uploader's small passes are), by a server with packs on over the same bucket and index.
                    later = start_server(over=plain)
                    started = time.perf_counter()
                    packed = httpx.post(f"{later.url}/admin/pack", json={}, timeout=timeout).json()
                    seconds = time.perf_counter() - started
                    result.figures["packing later: seconds"] = seconds
                    result.figures["packing later: entries packed"] = packed["entries_packed"]
                    result.figures["packing later: packs written"] = packed["packs_written"]
                    wait_quiet(later.pid)
                    later_floor = Series(
                        "tar c | tar x of the same entries, before each warm() after packing later",
                        work={"entries": count},
                    )
                    warms_from("warm() after packing later", later, [], with_floor(later_floor))
                    result.add(later_floor)
    if timed_out:
        push_series.note = f"timed out after {timeout:g} s"
    floor_median = floor.median if floor.seconds else float("nan")
    result.target(
        f"push of {FULL_COUNT:,} entries <= {PUSH_LIMIT:g} s",
        push_series.median,
        PUSH_LIMIT,
        at_most=True,
        fmt="{:.2f} s" if not timed_out else "> {:.0f} s (timed out)",
        why=f"{result.figures['gcs_requests_per_entry_push']:.2f} GCS requests per entry",
        not_measured=quick_note,
    )
    result.target(
        f"warm of {FULL_COUNT:,} entries <= {WARM_LIMIT:g} s",
        warm_series.median if warm_series else None,
        WARM_LIMIT,
        at_most=True,
        fmt="{:.2f} s" if not (warm_series and warm_series.note) else "> {:.0f} s (timed out)",
        why=(
            f"{result.figures.get('gcs_requests_per_entry_warm', 0):.2f} GCS requests per entry (packs); "
            f"tar's copy of the same entries just before each took {floor_median:.2f} s (median)"
            if warm_series
            else "no complete push to warm from"
        ),
        not_measured=quick_note or ("" if warm_series else "no complete push to warm from"),
    )
