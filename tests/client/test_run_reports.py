"""Run reports, client side: what the reporter sends and when, what it takes for a compile, how it fails
open, and how JAX's cache-key log lines become a key's components.

Reports go over real HTTP to the test receiver (:mod:`tests.support.run_receiver`), which checks every body
against the wire contract (:mod:`cache_protocol.runs`); a report it refuses fails the test.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import threading
import time
import types
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from starlette.types import Receive, Scope, Send

import xla_cache
from cache_protocol.runs import (
    COMPONENT_NAMES,
    MAX_MISSES_PER_REPORT,
    REPORT_INTERVAL_SECONDS,
    RUN_ID_PATTERN,
)
from tests.support.client_kit import FakeTorchXla, RealServer
from tests.support.clock import ManualMonotonic
from tests.support.run_receiver import RunReceiver, no_run_routes, report_problems
from tests.support.server import free_port
from tests.support.threaded_server import serve_in_thread
from xla_cache import warming
from xla_cache.config import run_report_settings
from xla_cache.frameworks import all_frameworks
from xla_cache.http.api import CacheApi
from xla_cache.localcache.cachedir import LocalFile, scan
from xla_cache.runs import CompileCounts, MissFacts, RunCollector, RunReporter, Transfers, WarmFacts
from xla_cache.runs.jax_events import JaxCollector, JaxEvents, KeyComponentLog, key_hash, module_of
from xla_cache.runs.ranks import RANK_VARIABLES, launcher_rank
from xla_cache.warming import warm

INTERVAL = 60.0
HEX = "ab" * 32


def entry(directory: Path, n: int, module: str = "jit_step") -> str:
    """Write a JAX-named entry file; its key."""
    key = f"{module}-{n:064x}-cache"
    (directory / key).write_bytes(b"executable")
    return key


class FakeCollector(RunCollector):
    """Counts the test sets, and JAX's facts of a file: its module from the name, components made up."""

    def __init__(self) -> None:
        self.now = CompileCounts()

    def framework(self) -> str:
        return "jax"

    def counts(self) -> CompileCounts:
        return self.now

    def facts(self, files: Sequence[LocalFile]) -> dict[str, MissFacts]:
        return {
            f.key: MissFacts(
                module=module_of(f.key), components={"computation": "c0ffee"}, compile_seconds=0.5
            )
            for f in files
        }


class Setup:
    """A reporter over ``directory`` reporting to ``url``, on a clock the test moves."""

    made: ClassVar[list[Setup]] = []

    def __init__(
        self, directory: Path, url: str, collector: FakeCollector | None = None, **kwargs: Any
    ) -> None:
        Setup.made.append(self)
        self.directory = directory
        self.api = CacheApi(url)
        self.collector = collector or FakeCollector()
        self.clock = ManualMonotonic()
        self.transfers = Transfers()
        self.reporter = RunReporter(
            api=self.api,
            namespace="cpu-jax0.10.2-test",
            directory=directory,
            adapter=all_frameworks()["jax"],
            collector=self.collector,
            transfers=lambda: self.transfers,
            baseline=scan(directory),
            interval=INTERVAL,
            clock=self.clock,
            **kwargs,
        )
        self.reporter.begin(WarmFacts(started_at=time.time(), seconds=1.25, bytes=4096, entries=2))


@pytest.fixture(autouse=True)
def _close_apis() -> Iterator[None]:
    yield
    while Setup.made:
        Setup.made.pop().api.close()


@pytest.fixture
def receiver() -> Iterator[tuple[str, RunReceiver]]:
    """The run receiver alone on a loopback port."""
    alone = RunReceiver()
    with serve_in_thread(alone) as url:
        yield url, alone
    assert alone.refused == [], alone.refused  # every report the client made keeps the contract


def test_reports_carry_cumulative_numbers_and_each_new_compile_once(
    tmp_path: Path, receiver: tuple[str, RunReceiver]
) -> None:
    url, taken = receiver
    warmed = entry(tmp_path, 1)
    setup = Setup(tmp_path, url)
    run_id = setup.reporter.run_id
    compiled = [entry(tmp_path, 2), entry(tmp_path, 3, "jit_loss")]
    setup.collector.now = CompileCounts(hits=1, misses=2, compile_seconds=1.5)
    setup.transfers = Transfers(uploaded=2)

    setup.reporter.tick()  # the first tick after the warm reports
    setup.reporter.tick()  # not due again yet
    (first,) = taken.reports_of(run_id)
    numbers = (first["hits"], first["misses"], first["compile_seconds"], first["uploaded_entries"])
    assert numbers == (1, 2, 1.5, 2)
    assert (first["warm_entries"], first["warm_bytes"], first["warm_seconds"]) == (2, 4096, 1.25)
    assert first["framework"] == "jax" and first["ended_at"] is None
    assert sorted(m["key"] for m in first["new_misses"]) == sorted(compiled)  # not the warmed entry
    assert {m["module"] for m in first["new_misses"]} == {"jit_step", "jit_loss"}
    assert all(m["components"] == {"computation": "c0ffee"} for m in first["new_misses"])

    setup.clock.advance(INTERVAL)
    setup.collector.now = CompileCounts(hits=5, misses=2, compile_seconds=1.5)
    setup.reporter.tick()
    later = entry(tmp_path, 4)
    setup.reporter.finish()
    setup.reporter.finish()  # stop, then the exit handler: one last report
    _, second, last = taken.reports_of(run_id)
    assert second["hits"] == 5 and second["new_misses"] == [] and second["ended_at"] is None
    assert [m["key"] for m in last["new_misses"]] == [later] and last["ended_at"] >= last["started_at"]
    assert warmed not in {m["key"] for m in taken.misses_of(run_id)}
    now = setup.reporter.current()
    assert (now["reports_sent"], now["unreported_misses"], len(now["missed_keys"])) == (3, 0, 3)


def test_entries_the_follower_placed_are_no_compiles_and_rewritten_ones_failed_to_load(
    tmp_path: Path, receiver: tuple[str, RunReceiver]
) -> None:
    url, taken = receiver
    stale = entry(tmp_path, 1)
    setup = Setup(tmp_path, url, unloadable=[f"jit_step-{2:064x}-cache"])
    removed = entry(tmp_path, 2)  # removed by the warm as unloadable, written again by the job
    live = entry(tmp_path, 3)
    setup.transfers = Transfers(live=1, live_keys=frozenset({live}), unverified=2)
    old = (tmp_path / stale).stat().st_mtime_ns
    (tmp_path / stale).write_bytes(b"written again")  # the framework could not load it: it compiled again
    os.utime(tmp_path / stale, ns=(old + 10**9, old + 10**9))
    setup.reporter.finish()
    (report,) = taken.reports_of(setup.reporter.run_id)
    assert {m["key"]: m["load_failed"] for m in report["new_misses"]} == {stale: True, removed: True}
    assert report["live_entries"] == 1 and report["load_failures"] == 1  # the one the warm removed
    assert (
        report["unverified_entries"] == 2
    )  # skipped by the warm and the follower: no trusted key signed them


def test_reports_name_the_warmed_entries_the_job_read_each_once(
    tmp_path: Path, receiver: tuple[str, RunReceiver]
) -> None:
    """Issue 46, item 6: a hit is priced by its own entry, so the report names which entries the job loaded
    (those the warm left and the job read afterwards), never one it did not read, each once."""
    url, taken = receiver
    warmed = [entry(tmp_path, n) for n in range(1, 5)]
    setup = Setup(tmp_path, url)
    for key in (warmed[0], warmed[2]):
        (tmp_path / key).read_bytes()  # the framework loads it
    setup.reporter.tick()
    (tmp_path / warmed[1]).read_bytes()
    compiled = entry(tmp_path, 9)  # a compile's new file, read by the uploader: no hit
    (tmp_path / compiled).read_bytes()
    setup.reporter.finish()
    first, last = taken.reports_of(setup.reporter.run_id)
    assert sorted(first["hit_keys"]) == sorted([warmed[0], warmed[2]])
    assert last["hit_keys"] == [warmed[1]]
    assert sorted(setup.reporter.current()["hit_keys"]) == sorted(warmed[:3])


def test_misses_past_one_report_wait_for_the_next(tmp_path: Path, receiver: tuple[str, RunReceiver]) -> None:
    url, taken = receiver
    setup = Setup(tmp_path, url)
    keys = [entry(tmp_path, n) for n in range(MAX_MISSES_PER_REPORT + 5)]
    setup.reporter.tick()
    assert len(taken.misses_of(setup.reporter.run_id)) == MAX_MISSES_PER_REPORT
    assert setup.reporter.current()["unreported_misses"] == 5
    setup.reporter.finish()  # at exit, the rest go too
    sent = [m["key"] for m in taken.misses_of(setup.reporter.run_id)]
    assert sorted(sent) == sorted(keys) and len(sent) == len(set(sent))


class Flaky:
    """Answers 503 to the first ``failures`` requests, then hands them to ``app``."""

    def __init__(self, app: RunReceiver, failures: int) -> None:
        self.app, self.failures = app, failures

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.failures > 0:
            self.failures -= 1
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"busy"})
            return
        await self.app(scope, receive, send)


def test_a_failing_server_costs_one_warning_and_the_misses_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    taken = RunReceiver()
    with serve_in_thread(Flaky(taken, failures=2)) as url:
        setup = Setup(tmp_path, url)
        key = entry(tmp_path, 1)
        with caplog.at_level(logging.INFO, logger="xla_cache"):
            setup.reporter.tick()
            setup.clock.advance(INTERVAL)
            setup.reporter.tick()
            assert taken.runs() == []
            setup.clock.advance(INTERVAL)
            setup.reporter.tick()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "HTTP 503" in warnings[0].getMessage()
    assert [m["key"] for m in taken.misses_of(setup.reporter.run_id)] == [key]
    assert "reach the server again" in caplog.text


class Odd(FakeCollector):
    """Facts the server refuses (a component without a name) for keys of module ``jit_odd``."""

    def facts(self, files: Sequence[LocalFile]) -> dict[str, MissFacts]:
        found = super().facts(files)
        return {
            k: MissFacts(module="jit_odd", components={"": "x"}) if "odd" in k else v
            for k, v in found.items()
        }


def test_compiles_the_server_refuses_are_dropped_not_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    taken = RunReceiver()
    with serve_in_thread(taken) as url:
        setup = Setup(tmp_path, url, Odd())
        entry(tmp_path, 1, "jit_odd")
        setup.reporter.tick()
        good = entry(tmp_path, 2)
        setup.reporter.finish()
    assert len(taken.refused) == 1 and "components" in taken.refused[0][1][0]
    first, last = taken.reports_of(setup.reporter.run_id)
    assert first["new_misses"] == [] and [m["key"] for m in last["new_misses"]] == [good]
    assert "the server refused 1 compiles" in caplog.text


class Sited(FakeCollector):
    """JAX's facts of a file, with where the job compiled it."""

    def facts(self, files: Sequence[LocalFile]) -> dict[str, MissFacts]:
        return {k: replace(v, source="jobs/train.py:57") for k, v in super().facts(files).items()}


@pytest.mark.parametrize("older", [False, True])
def test_each_compile_carries_where_the_job_compiled_it_and_an_older_server_still_gets_the_compile(
    tmp_path: Path, older: bool
) -> None:
    taken = RunReceiver(older=older)
    with serve_in_thread(taken) as url:
        setup = Setup(tmp_path, url, Sited())
        key = entry(tmp_path, 1)
        setup.reporter.finish()
    (miss,) = taken.misses_of(setup.reporter.run_id)
    assert miss["key"] == key and miss["compile_seconds"] == 0.5  # the compile itself is never dropped
    assert miss.get("source") == (None if older else "jobs/train.py:57")
    assert len(taken.refused) == (1 if older else 0)  # the older server refused the field once
    assert setup.reporter.current()["missed_keys"][0]["source"] == "jobs/train.py:57"


def test_a_server_without_run_reports_is_told_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with serve_in_thread(no_run_routes) as url, caplog.at_level(logging.INFO, logger="xla_cache"):
        setup = Setup(tmp_path, url)
        setup.reporter.tick()
        setup.clock.advance(INTERVAL)
        setup.reporter.tick()
        setup.reporter.finish()
    told = [r for r in caplog.records if "not sending run reports" in r.getMessage()]
    assert len(told) == 1 and told[0].levelno == logging.INFO and "HTTP 404" in told[0].getMessage()
    assert setup.reporter.current()["reporting"] is False


def test_a_server_that_does_not_answer_does_not_delay_the_exit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    setup = Setup(tmp_path, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    entry(tmp_path, 1)
    with caplog.at_level(logging.INFO, logger="xla_cache"):
        setup.reporter.tick()
        started = time.monotonic()
        setup.reporter.finish()
    assert time.monotonic() - started < 0.5
    assert "cannot connect" in caplog.text and "not sending the last run report" in caplog.text
    assert setup.reporter.current()["unreported_misses"] == 1


def test_settings_come_from_the_environment(caplog: pytest.LogCaptureFixture) -> None:
    assert run_report_settings({}).enabled and run_report_settings({}).interval == REPORT_INTERVAL_SECONDS
    assert not run_report_settings({"XLA_CACHE_RUN_REPORTS": "0"}).enabled
    assert run_report_settings({"XLA_CACHE_REPORT_INTERVAL": "1.5"}).interval == 1.5
    for bad in ("soon", "-1", "inf", "0"):
        assert run_report_settings({"XLA_CACHE_REPORT_INTERVAL": bad}).interval == REPORT_INTERVAL_SECONDS
    assert "XLA_CACHE_REPORT_INTERVAL='soon' is not a positive number" in caplog.text


# -- JAX's cache-key log ------------------------------------------------------------------------------------


def key_lines(components: dict[str, str], final: str) -> list[str]:
    """The DEBUG lines jax._src.cache_key logs for one key (running hashes made up, the last ``final``)."""
    lines = []
    names = list(components)
    for number, name in enumerate(names):
        lines.append(f"get_cache_key hash of serialized {name}: {components[name]}")
        running = final if number == len(names) - 1 else f"{number:02x}" * 32
        lines.append(f"get_cache_key hash after serializing {name}: {running}")
    return lines


def test_the_components_of_a_key_are_tied_to_it_by_the_last_running_hash() -> None:
    log = KeyComponentLog()
    one = {name: f"{n:x}" * 64 for n, name in enumerate(COMPONENT_NAMES, start=1)}
    two = {**one, "compile_options": "f" * 64}
    later = {**one, "a component JAX 0.11 adds": "e" * 64}  # not assumed away
    other = "cd" * 32
    first, second = key_lines(one, HEX), key_lines(two, other)
    for a, b in zip(first, second, strict=True):  # two threads computing keys at once
        log.read(a, thread=1)
        log.read(b, thread=2)
    for line in key_lines(later, "ef" * 32):
        log.read(line, thread=1)
    assert log.components(HEX) == one and log.components(other) == two
    assert log.components("ef" * 32) == later
    assert log.components(HEX) is None  # handed out once
    assert log.components("00" * 32) is None  # a running hash that was not the last: forgotten


def test_the_filter_reads_every_line_and_passes_only_what_the_job_would_have_seen() -> None:
    quiet = KeyComponentLog(passes_below=logging.WARNING)
    verbose = KeyComponentLog(passes_below=logging.DEBUG)
    records = [
        logging.LogRecord("jax._src.cache_key", logging.DEBUG, __file__, 1, line, None, None)
        for line in key_lines({"computation": "1" * 64}, HEX)
    ]
    assert [quiet.filter(r) for r in records] == [False, False]
    assert [verbose.filter(r) for r in records] == [True, True]
    assert quiet.components(HEX) == verbose.components(HEX) == {"computation": "1" * 64}


def test_a_jax_file_name_gives_its_module_and_key_hash() -> None:
    assert module_of(f"jit_train-step-{HEX}-cache") == "jit_train-step"
    assert key_hash(f"jit_train-step-{HEX}-cache") == HEX
    assert module_of("123456789") is None and key_hash(f"jit_f-{HEX}-atime") is None


def test_compile_seconds_count_compiles_not_loads() -> None:
    """JAX times each lookup as a backend compile: a hit's time is its load, not a compile."""
    events = JaxEvents(KeyComponentLog())

    def compile_one(final: str, *, hit: bool, seconds: float) -> None:
        for line in key_lines({"computation": "1" * 64}, final):
            events.key_log.read(line, threading.get_ident())
        events.on_event("/jax/compilation_cache/compile_requests_use_cache")
        if hit:
            events.on_event("/jax/compilation_cache/cache_hits")
        events.on_duration("/jax/core/compile/backend_compile_duration", seconds, fun_name="step")

    worker = threading.Thread(target=compile_one, args=(HEX,), kwargs={"hit": False, "seconds": 2.0})
    worker.start()
    worker.join()
    compile_one("cd" * 32, hit=True, seconds=0.25)
    compile_one("ef" * 32, hit=False, seconds=0.5)
    counts = events.snapshot()
    assert (counts.hits, counts.misses, counts.compile_seconds) == (1, 2, 2.5)
    assert events.duration(HEX) == 2.0 and events.duration("cd" * 32) is None


def test_the_receiver_refuses_what_the_server_refuses() -> None:
    good: dict[str, Any] = {
        "run_id": "a" * 32,
        "namespace": "cpu-jax0.10.2-x",
        "framework": "jax",
        "host": "h",
        "started_at": 1.0,
        "new_misses": [{"key": f"jit_f-{HEX}-cache"}],
    }
    assert report_problems(good) == []
    for change in (
        {"hits": 2**53 + 1},
        {"hits": True},
        {"compile_seconds": float("nan")},
        {"surprise": 1},
        {"run_id": "../x"},
        {"framework": "tensorflow"},
        {"new_misses": [{"key": "../etc"}]},
        {"new_misses": [{"key": f"k{n}"} for n in range(MAX_MISSES_PER_REPORT + 1)]},
        {"ended_at": 0.5},
    ):
        assert report_problems({**good, **change}), change


def test_a_job_that_imported_torchax_reports_as_torchax(monkeypatch: pytest.MonkeyPatch) -> None:
    collector = JaxCollector(JaxEvents(KeyComponentLog()))
    monkeypatch.delitem(sys.modules, "torchax", raising=False)
    assert collector.framework() == "jax"
    monkeypatch.setitem(sys.modules, "torchax", types.ModuleType("torchax"))
    assert collector.framework() == "torchax"


def test_a_run_keeps_the_framework_it_began_with(tmp_path: Path, receiver: tuple[str, RunReceiver]) -> None:
    """The server refuses a run whose framework changes: torchax imported after the warm changes nothing."""

    class Changing(FakeCollector):
        name = "jax"

        def framework(self) -> str:
            return self.name

    url, taken = receiver
    collector = Changing()
    setup = Setup(tmp_path, url, collector)
    collector.name = "torchax"
    setup.reporter.tick()
    setup.reporter.finish()
    assert [r["framework"] for r in taken.reports_of(setup.reporter.run_id)] == ["jax", "jax"]


def test_warm_names_its_run_and_reports_can_be_turned_off(
    fake_torch_xla: FakeTorchXla,
    real_server: RealServer,
    fingerprint: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report = warm(real_server.url, tmp_path, fingerprint=fingerprint, timeout=10.0)
    assert report.run_id is not None and RUN_ID_PATTERN.fullmatch(report.run_id)
    now = xla_cache.run_report()
    assert now is not None and (now["run_id"], now["namespace"]) == (report.run_id, report.namespace)
    assert now["framework"] == "torch_xla" and now["ended_at"] is None
    xla_cache.stop()

    monkeypatch.setenv("XLA_CACHE_RUN_REPORTS", "0")
    again = warm(real_server.url, tmp_path, fingerprint=fingerprint, timeout=10.0)
    assert again.run_id is None and xla_cache.run_report() is None


def test_a_reporter_that_cannot_start_costs_the_job_nothing_but_a_warning(
    fake_torch_xla: FakeTorchXla,
    real_server: RealServer,
    fingerprint: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: object, **kwargs: object) -> RunReporter:
        raise RuntimeError("the framework's counters could not be read")

    monkeypatch.setattr(warming, "reporter_for", broken)
    with caplog.at_level(logging.WARNING, logger="xla_cache"):
        report = warm(real_server.url, tmp_path, fingerprint=fingerprint, timeout=10.0)
    assert report.errors == [] and report.run_id is None and xla_cache.run_report() is None
    assert any("cannot report this run" in r.getMessage() for r in caplog.records)
    xla_cache.stop()


class Ranked(FakeCollector):
    """A framework whose distributed runtime is up (``index``) or has one process (None)."""

    def __init__(self, index: int | None) -> None:
        super().__init__()
        self.index = index

    def process_index(self) -> int | None:
        return self.index


@pytest.mark.parametrize(
    ("framework_index", "env", "expected"),
    [
        (3, {"RANK": "1"}, 3),  # jax.distributed / multi-host torch_xla: the framework's own index
        (None, {"RANK": "5", "LOCAL_RANK": "1"}, 5),  # torchrun: the global rank
        (None, {"SLURM_PROCID": "4", "LOCAL_RANK": "0"}, 4),  # srun
        (None, {"LOCAL_RANK": "1"}, 1),
        (None, {"PJRT_LOCAL_PROCESS_RANK": "2"}, 2),  # a process xmp.spawn started
        (None, {"RANK": "not a number"}, 0),
        (None, {}, 0),  # a job of one process
    ],
)
def test_each_process_of_a_job_reports_which_it_is(
    tmp_path: Path,
    receiver: tuple[str, RunReceiver],
    monkeypatch: pytest.MonkeyPatch,
    framework_index: int | None,
    env: dict[str, str],
    expected: int,
) -> None:
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    url, taken = receiver
    setup = Setup(tmp_path, url, Ranked(framework_index))
    setup.reporter.finish()
    assert [r["process_index"] for r in taken.reports_of(setup.reporter.run_id)] == [expected]


def test_a_child_multiprocessing_started_has_its_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks started with ``multiprocessing`` (spawn) and no launcher variable: the child's number."""
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert launcher_rank() is None  # this process: no launcher
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        rank, number = pool.apply(_rank_and_number)
    # the child's number: 1 for the first child this process started (more once other tests started some)
    assert rank == number >= 1


def _rank_and_number() -> tuple[int | None, int]:
    """In a multiprocessing child: its rank as the client reads it, and the number multiprocessing gave it."""
    return launcher_rank(), multiprocessing.current_process()._identity[-1]


class WithRuntime(FakeCollector):
    """A JAX runtime's key components, as :func:`~xla_cache.frameworks.key_components.key_components`
    reads them."""

    def runtime(self) -> dict[str, Any] | None:
        return {"platform": "cpu", "platform_version": "cpu", "devices": [[0, []]], "xla_caches": "none"}


def test_the_first_report_carries_the_runtimes_key_components_once(
    tmp_path: Path, receiver: tuple[str, RunReceiver]
) -> None:
    url, taken = receiver
    setup = Setup(tmp_path, url, WithRuntime())
    setup.reporter.tick()
    setup.reporter.finish()
    first, last = taken.reports_of(setup.reporter.run_id)
    assert first["runtime"]["platform_version"] == "cpu" and "runtime" not in last  # taken: not sent again


def test_a_server_from_before_runtimes_takes_the_report_without_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support import run_receiver

    monkeypatch.setattr(run_receiver, "_FIELDS", run_receiver._FIELDS - {"runtime"})  # refused as unknown
    taken = RunReceiver()
    with serve_in_thread(taken) as url:
        setup = Setup(tmp_path, url, WithRuntime())
        setup.reporter.tick()
        setup.reporter.finish()
    assert len(taken.refused) == 1 and "unknown field 'runtime'" in taken.refused[0][1][0]
    first, last = taken.reports_of(setup.reporter.run_id)  # both stored, neither with it
    assert "runtime" not in first and "runtime" not in last
