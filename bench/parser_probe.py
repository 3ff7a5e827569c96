"""What the fourth probe's parser entries cost (issue 42, item 3), through the server's parsing service and
its real child process (SQLite index, local store, in this process): the other namespace's parse delay behind
one writer's backlog, the child's peak resident memory for an entry of MiB-long source strings, and the CPU
one crafted TPU entry of many oversized candidate modules costs the parser.

    .venv/bin/python -m bench.parser_probe [--backlog 40]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sqlalchemy import text

from cache_server.parsing.hlo import parse_entry
from cache_server.settings import Settings
from cache_server.wiring import Services, build_services
from tests.support.api import sha
from tests.support.crafted_entries import long_sources, tpu_candidates, wide
from tests.support.migrated import migrated
from tests.support.process_tree import peak_rss_mib
from tests.support.real_entries import real_entries


def _recorded(services: Services, namespace: str) -> int:
    with services.database.transaction() as session:
        query = text("SELECT count(*) FROM entry_graphs WHERE namespace = :ns")
        return int(session.execute(query, {"ns": namespace}).scalar_one())


def _store(services: Services, namespace: str, key: str, data: bytes) -> None:
    services.cache.put_entry(namespace, key, [data], sha256=sha(data))


def _wait(services: Services, namespace: str, count: int, timeout: float = 600.0) -> float:
    started = time.monotonic()
    while _recorded(services, namespace) < count:
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{namespace}: fewer than {count} recorded in {timeout:g} s")
        time.sleep(0.02)
    return time.monotonic() - started


def _child_peak_mib(services: Services) -> float:
    pid = services.parsing.child_pid()
    assert pid is not None
    return peak_rss_mib(pid)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=40, help="slow entries of one namespace first")
    args = parser.parse_args(argv)
    started = time.process_time()
    parse_entry([tpu_candidates(0)])
    print(
        f"a TPU entry of 16 candidates of 250,000 instructions: {time.process_time() - started:.2f} s of CPU"
    )
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "data", access_flush_seconds=60.0)
        migrated(settings)
        services = build_services(settings)
        try:
            services.start()
            _store(services, "sources", "long", long_sources(0, strings=50))
            _wait(services, "sources", 1)
            print(
                f"the child's peak RSS after 50 source strings of 1 MiB: {_child_peak_mib(services):.0f} MiB"
            )
            for n in range(args.backlog):
                _store(services, "busy", f"slow{n:03d}", wide(n, instructions=100_000))
            while _recorded(services, "busy") == 0:
                time.sleep(0.02)
            _store(services, "other", "good", next(iter(real_entries().values())))
            waited = _wait(services, "other", 1)
            left = args.backlog - _recorded(services, "busy")
            print(
                f"the other namespace's entry behind {args.backlog} slow entries: recorded after "
                f"{waited:.2f} s, {left} of the backlog still waiting"
            )
        finally:
            services.stop()


if __name__ == "__main__":
    main()
