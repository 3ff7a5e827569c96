"""Background graph parsing waits for a quiet moment, catches up when overdue, and records in batches."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from cache_server.background.activity import Activity
from cache_server.domain import utcnow
from cache_server.index import EntryRepository
from cache_server.index.graph_records import GraphRecord, GraphRepository
from cache_server.parsing import service as parsing_service
from cache_server.parsing import worker
from cache_server.parsing.service import ParsingService
from cache_server.parsing.worker import ParserProcess, ParserResting, parse_blob
from cache_server.settings import Settings
from cache_server.wiring import Services
from tests.support.api import sha
from tests.support.apps import another_cache_service, services_of
from tests.support.real_entries import real_entries
from tests.support.wait import wait_until


def _store_real_entries(settings: Settings, services: Services, namespace: str) -> list[str]:
    cache = another_cache_service(settings, services)
    for key, data in real_entries().items():
        cache.put_entry(namespace, key, [data], sha256=sha(data))
    return list(real_entries())


def _unparsed(services: Services) -> int:
    return len(GraphRepository(services.database).unparsed_entries(100))


def test_parsing_waits_while_requests_are_in_flight(settings: Settings, services: Services) -> None:
    _store_real_entries(settings, services, "busy")
    activity = Activity()
    indexer = ParsingService(GraphRepository(services.database), services.store, activity=activity)
    indexer.start()
    try:
        assert indexer.wait_idle(30)  # the catch-up at start parses what is already stored
        cache = another_cache_service(settings, services)
        data = b"not an executable, parsed as unparseable"
        activity.begin()  # a request is being served
        cache.put_entry("busy", "late", [data], sha256=sha(data))
        indexer.notify("busy", "late")
        # the time is what is tested: for four quiet periods with a request in flight nothing is parsed
        time.sleep(parsing_service.QUIET_SECONDS * 4)
        assert _unparsed(services) == 1, "parsed while a request was in flight"
        activity.end()
        assert indexer.wait_idle(5), "not parsed once the process was quiet"
        assert _unparsed(services) == 0
    finally:
        indexer.stop()


def test_parsing_catches_up_when_overdue_however_busy(
    settings: Settings, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parsing_service, "MAX_DELAY_SECONDS", 0.5)
    activity = Activity()
    activity.begin()  # busy for the whole test: a request that never ends
    indexer = ParsingService(GraphRepository(services.database), services.store, activity=activity)
    indexer.start()
    try:
        assert indexer.wait_idle(30)
        keys = _store_real_entries(settings, services, "always-busy")
        for key in keys:
            indexer.notify("always-busy", key)
        assert _unparsed(services) == len(keys)
        wait_until(
            lambda: _unparsed(services) == 0,
            timeout=10,
            interval=0.02,
            message="never parsed under constant load",
        )
    finally:
        indexer.stop()


def test_records_of_a_batch_skip_an_entry_evicted_meanwhile(settings: Settings, services: Services) -> None:
    keys = _store_real_entries(settings, services, "batch")
    EntryRepository(services.database).delete_entry("batch", keys[0], policy="admin", when=utcnow())
    repository = GraphRepository(services.database)
    records = [GraphRecord("batch", key, module=f"m{i}") for i, key in enumerate(keys)]
    assert repository.record_graphs(records) == len(keys) - 1
    assert repository.unparsed_entries(10) == []
    assert repository.record_graphs(records[1:]) == len(keys) - 1  # recorded again: nothing changes


class _SlowRepository:
    """An index whose catch-up scan takes a second and finds nothing: the parser is busy meanwhile."""

    def unparsed_entries(self, limit: int) -> list[tuple[str, str]]:
        time.sleep(1.0)  # the slow scan itself, on purpose: the queue fills meanwhile
        return []

    def record_graphs(self, records: list[GraphRecord]) -> int:
        return len(records)


def test_stop_returns_with_the_queue_full(services: Services) -> None:
    indexer = ParsingService(_SlowRepository(), services.store, queue_size=2)  # type: ignore[arg-type]
    indexer.start()  # busy in its catch-up scan: nothing is taken off the queue meanwhile
    for key in ("1", "2", "3"):  # the third overflows (and asks for another scan)
        indexer.notify("full", key)
    started = time.monotonic()
    indexer.stop()
    assert time.monotonic() - started < 5


def test_every_request_but_a_feed_poll_makes_the_process_busy(client: TestClient) -> None:
    activity = services_of(client).activity
    wait_until(lambda: activity.quiet_for(0.2), timeout=5, interval=0.02)
    assert client.get("/healthz").status_code == 200
    assert not activity.quiet_for(5)  # just served one
    wait_until(lambda: activity.quiet_for(0.2), timeout=5, interval=0.02)  # and none is left in flight
    client.put("/v1/namespaces/polled", json={"fingerprint": {"torch_xla": "2.7.0"}})
    wait_until(lambda: activity.quiet_for(0.2), timeout=5, interval=0.02)
    assert client.get("/v1/namespaces/polled/feed", params={"wait": 0}).status_code == 200
    assert activity.quiet_for(0.2)  # a long poll mostly waits: it is not work


def _graph_records(services: Services, namespace: str) -> dict[str, str | None]:
    with services.database.transaction() as session:
        rows = session.execute(
            text("SELECT key, module FROM entry_graphs WHERE namespace = :ns"), {"ns": namespace}
        )
        return {str(key): module for key, module in rows}


def test_the_server_parses_in_a_child_process_off_its_gil(settings: Settings, services: Services) -> None:
    """The wiring gives the indexer a child process: what it records is what this process would find."""
    parser = services.parsing._parser
    assert isinstance(parser, ParserProcess)
    services.start()
    keys = _store_real_entries(settings, services, "child")
    for key in keys:
        services.parsing.notify("child", key)
    assert services.parsing.wait_idle(60)
    pid = parser.child_pid()
    assert pid is not None and pid != os.getpid()
    found = _graph_records(services, "child")
    assert set(found) == set(keys)
    here = {key: parse_blob(services.store, "child", key).info for key in keys}
    assert found == {key: info.module if info else None for key, info in here.items()}
    assert all(found.values())  # real executables: every one has its module name
    started = time.monotonic()
    services.stop()
    assert time.monotonic() - started < 5
    assert parser.child_pid() is None
    wait_until(
        lambda: not _pid_exists(pid), timeout=5, interval=0.02, message="the child outlived the server's stop"
    )


def test_a_failed_parser_process_rests_before_a_new_one_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = ParserProcess("nowhere://at-all")
    try:
        with pytest.raises(Exception) as first:
            broken.parse([("ns", "k")])
        assert not isinstance(first.value, ParserResting)
        with pytest.raises(ParserResting):  # no new interpreter for every batch of a long catch-up
            broken.parse([("ns", "k")])
        monkeypatch.setattr(worker, "RETRY_SECONDS", 0.0)
        with pytest.raises(Exception) as again:  # rested: it tries a new child
            broken.parse([("ns", "k")])
        assert not isinstance(again.value, ParserResting)
    finally:
        broken.close()


def test_a_child_that_cannot_be_spawned_rests_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Failing to start a process at all (no memory, no process slots) rests like a child that failed."""
    spawned: list[int] = []

    def refuse(self: object) -> None:
        spawned.append(1)
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(multiprocessing.get_context("spawn").Process, "start", refuse)
    parser = ParserProcess((tmp_path / "blobs").as_uri())
    try:
        with pytest.raises(worker.ChildFailed, match="could not be started"):
            parser.parse([("ns", "k")])
        with pytest.raises(ParserResting):
            parser.parse([("ns", "k")])
        assert spawned == [1] and parser.child_pid() is None
    finally:
        parser.close()


def test_the_parser_child_exits_when_its_server_process_is_killed(tmp_path: Path) -> None:
    script = (
        "import os, sys\n"
        "from cache_server.parsing.worker import ParserProcess\n"
        "parser = ParserProcess(sys.argv[1])\n"
        "parser.parse([])\n"
        "print(parser.child_pid(), flush=True)\n"
        "os._exit(0)  # as a SIGKILL would: nothing is cleaned up\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, (tmp_path / "blobs").as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    child = int(done.stdout.strip())
    wait_until(lambda: not _pid_exists(child), timeout=worker.PARENT_CHECK_SECONDS * 3 + 5, interval=0.02)


def _pid_exists(pid: int) -> bool:
    """Whether the process runs (a zombie, or one that ends while it is looked at, does not)."""
    try:
        os.kill(pid, 0)
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False


def test_a_parser_process_that_cannot_start_parses_nothing_on_the_thread(
    settings: Settings, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    """No batch is ever parsed in the server's process: the entries wait for a later catch-up scan."""
    keys = _store_real_entries(settings, services, "fallback")
    broken = ParserProcess("nowhere://at-all")  # the child's store cannot be opened: it never starts
    indexer = ParsingService(GraphRepository(services.database), services.store, parser=broken)
    try:
        assert indexer.parse_many([("fallback", key) for key in keys]) == 0
    finally:
        indexer.stop()
    assert _graph_records(services, "fallback") == {}
    assert "graph parsing postponed" in caplog.text


def test_graphs_parsed_before_bodies_were_read_are_parsed_again_and_keep_their_counts(
    settings: Settings, services: Services
) -> None:
    """Rows from before migration 0014 have a module and no body: the catch-up scan parses them again and
    fills the body in, leaving the module, signature and graph_counts as they were."""
    keys = _store_real_entries(settings, services, "old")
    repository = GraphRepository(services.database)
    indexer = ParsingService(repository, services.store)
    assert indexer.catch_up() == len(keys)
    with services.database.transaction() as session:
        before = session.execute(text("SELECT module, variants, entries FROM graph_counts ORDER BY 1")).all()
        # what a server before 0014 left: the same rows without their bodies
        session.execute(
            text("UPDATE entry_graphs SET structure = NULL, program = NULL, whole = NULL, ops = NULL")
        )
    assert sorted(repository.unparsed_entries(100)) == sorted(("old", key) for key in keys)
    assert indexer.catch_up() == len(keys)
    assert repository.unparsed_entries(100) == []
    with services.database.transaction() as session:
        rows = session.execute(text("SELECT structure, ops FROM entry_graphs WHERE namespace = 'old'")).all()
        after = session.execute(text("SELECT module, variants, entries FROM graph_counts ORDER BY 1")).all()
    assert len(rows) == len(keys) and all(structure and ops for structure, ops in rows)
    assert after == before


def test_a_batch_the_child_cannot_finish_is_parsed_an_entry_at_a_time_in_fresh_children(
    settings: Settings, services: Services, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    keys = _store_real_entries(settings, services, "split")
    parser = ParserProcess(settings.resolved_storage_url)
    indexer = ParsingService(GraphRepository(services.database), services.store, parser=parser)
    monkeypatch.setattr(worker, "BATCH_SECONDS", 0.0)  # no child finishes a batch in no time
    monkeypatch.setattr(ParsingService, "_parsed", lambda *_: pytest.fail("parsed on the server's thread"))
    try:
        assert indexer.parse_many([("split", key) for key in keys]) == len(keys)
    finally:
        indexer.stop()
    assert all(_graph_records(services, "split").values())
    assert "parsing it an entry at a time" in caplog.text


def test_an_entry_that_stalls_its_child_is_recorded_as_unparseable(
    settings: Settings, services: Services, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    keys = _store_real_entries(settings, services, "stall")
    parser = ParserProcess(settings.resolved_storage_url)
    indexer = ParsingService(GraphRepository(services.database), services.store, parser=parser)
    monkeypatch.setattr(worker, "BATCH_SECONDS", 0.0)
    monkeypatch.setattr(parsing_service, "ENTRY_SECONDS", 0.0)  # every entry alone stalls its child too
    try:
        assert indexer.parse_many([("stall", key) for key in keys[:2]]) == 2
        assert indexer.catch_up() == len(keys) - 2  # the unparseable ones are not tried again
    finally:
        indexer.stop()
    records = _graph_records(services, "stall")
    assert len(records) == len(keys) and not any(records.values())
    assert "recorded as unparseable" in caplog.text
