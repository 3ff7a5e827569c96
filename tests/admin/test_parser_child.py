"""The fourth probe's parser findings (issue 42, item 3), against the server's parsing service and its real
child process, on both index backends: one writer's backlog does not hold another namespace's new entry, a
MiB-long source file is cut before it is kept, and an entry that needs more memory than the child's cap is
recorded as such while the child goes on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from cache_server.index.graph_records import GraphRepository
from cache_server.parsing.service import ParsingService
from cache_server.parsing.worker import ParserProcess, memory_reason
from cache_server.settings import Settings
from cache_server.wiring import Services, build_services
from tests.support.api import sha
from tests.support.crafted_entries import inflating, long_sources, wide
from tests.support.databases import fresh_database_url
from tests.support.migrated import migrated
from tests.support.process_tree import peak_rss_mib
from tests.support.real_entries import real_entries
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e  # each test starts the server's parser child process

MIB = 1024 * 1024


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Settings, Services]]:
    """The server's parts over each index, with the parser child the server runs (not started yet)."""
    with fresh_database_url(request.param, tmp_path) as url:
        settings = Settings(data_dir=tmp_path / "data", database_url=url, access_flush_seconds=60.0)
        migrated(settings)
        services = build_services(settings)
        try:
            yield settings, services
        finally:
            services.stop()


def _records(services: Services, namespace: str) -> dict[str, tuple[str | None, str | None, str | None]]:
    """``key -> (module, source, unparseable)`` of the namespace's recorded graphs."""
    with services.database.transaction() as session:
        rows = session.execute(
            text("SELECT key, module, source, unparseable FROM entry_graphs WHERE namespace = :ns"),
            {"ns": namespace},
        )
        return {str(key): (module, source, why) for key, module, source, why in rows}


def _store(services: Services, namespace: str, key: str, data: bytes) -> None:
    services.cache.put_entry(namespace, key, [data], sha256=sha(data))  # notifies the parsing service


def _child_peak_mib(services: Services) -> float:
    pid = services.parsing.child_pid()  # the child the wiring gave the service
    assert pid is not None
    return peak_rss_mib(pid)


def test_one_namespaces_backlog_does_not_hold_another_namespaces_new_entry(
    served: tuple[Settings, Services],
) -> None:
    """40 entries of one namespace, each about a second of the child's work, then one of another: on a FIFO
    it waited for the whole backlog (40 s here; 34 s in the probe); served in turn it waits a slice (5.5 s
    here, quiet). Asserted by order, not by time, so a loaded machine does not fail it: when the other
    namespace's entry is recorded, most of the backlog still waits."""
    _, services = served
    services.start()
    assert services.parsing.wait_idle(30)
    for n in range(40):
        _store(services, "busy", f"slow{n:02d}", wide(n, instructions=100_000))
    wait_until(
        lambda: _records(services, "busy"), timeout=60, interval=0.05, message="the backlog never began"
    )
    good = next(iter(real_entries().values()))
    started = time.monotonic()
    _store(services, "other", "good", good)
    wait_until(
        lambda: "good" in _records(services, "other"),
        timeout=120,
        interval=0.05,
        message=lambda: f"still waiting; {len(_records(services, 'busy'))} of the backlog parsed",
    )
    waited = time.monotonic() - started
    module, _, why = _records(services, "other")["good"]
    assert module and why is None
    backlog_left = 40 - len(_records(services, "busy"))
    print(f"the other namespace's entry waited {waited:.2f} s, {backlog_left} of the backlog still waiting")
    assert backlog_left >= 30  # it waited for the entry being parsed and a slice, not for the backlog


def test_megabyte_source_files_are_cut_before_the_child_keeps_them(served: tuple[Settings, Services]) -> None:
    """The probe's 124 KiB entry of 1 MiB source_file strings took the child to 624 MiB; here 50 of them:
    the child holds the module's bytes (50 MiB) once, not every source again."""
    _, services = served
    services.start()
    assert services.parsing.wait_idle(30)
    data = long_sources(0, strings=50)
    assert len(data) < 100_000
    _store(services, "sources", "long", data)
    assert services.parsing.wait_idle(60)
    module, source, why = _records(services, "sources")["long"]
    assert module == "jit_sources0" and why is None
    assert source is not None and len(source) <= 300 and source.startswith("0/aaa"), source
    peak = _child_peak_mib(services)
    print(f"the parser child's peak RSS: {peak:.0f} MiB for 50 source files of 1 MiB")
    assert peak < 100


def test_an_entry_past_the_childs_memory_cap_is_unparseable_and_the_next_parses(
    served: tuple[Settings, Services],
) -> None:
    settings, services = served
    big = inflating(0, mib=200)  # 200 MiB inflated from about 200 KB: parseable under the default cap
    good = next(iter(real_entries().values()))
    _store(services, "capped", "big", big)
    _store(services, "capped", "good", good)
    parser = ParserProcess(settings.resolved_storage_url, memory_mb=96)
    parsing = ParsingService(GraphRepository(services.database), services.store, parser=parser)
    try:
        assert parsing.parse_many([("capped", "big"), ("capped", "good")]) == 2
        pid = parser.child_pid()
        assert parsing.parse_many([("capped", "good")]) == 1
        assert parser.child_pid() == pid  # the same child went on
    finally:
        parsing.stop()
    found = _records(services, "capped")
    assert found["big"] == (None, None, memory_reason(96))
    assert memory_reason(96) == "the parser ran out of its memory cap (96 MiB)"
    assert found["good"][0] and found["good"][2] is None
