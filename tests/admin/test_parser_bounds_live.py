"""The third probe's parser entries (issue 36, item 3) against a real server process: unparseable entries
ahead of a good one, a kill -9 before they are parsed, the catch-up after the restart; /healthz meanwhile."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx

from cache_protocol import SHA256_HEADER
from tests.support.api import sha
from tests.support.crafted_entries import bomb, cut, nested
from tests.support.real_entries import real_entries
from tests.support.server import run_server
from tests.support.wait import QUIET_POLL, wait_until


def _healthz(client: httpx.Client, seconds: list[float]) -> None:
    started = time.monotonic()
    assert client.get("/healthz").status_code == 200
    seconds.append(time.monotonic() - started)


def test_unparseable_entries_never_hold_up_a_good_one_across_a_kill(tmp_path: Path) -> None:
    crafted = [nested(700, n) for n in range(100)] + [bomb(n) for n in range(50)]
    crafted += [cut(n) for n in range(50)]
    good = next(iter(real_entries().values()))
    data_dir = tmp_path / "data"
    with run_server(data_dir) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        for n, data in enumerate([*crafted, good]):
            path = f"/v1/namespaces/probe/entries/k{n:04d}"
            answer = client.put(path, content=data, headers={SHA256_HEADER: sha(data)})
            assert answer.status_code in (200, 201), answer.text
        os.kill(server.pid, signal.SIGKILL)  # before the quiet moment the parser waits for
        server.process.wait()
    healthz: list[float] = []
    with run_server(data_dir) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        deadline = time.monotonic() + 90
        modules: list[str] = []
        while time.monotonic() < deadline:
            _healthz(client, healthz)
            answer = client.get("/admin/graphs", params={"namespace": "probe", "top": 100})
            assert answer.status_code == 200, answer.text
            modules = [graph["module"] for graph in answer.json()["graphs"]]
            if len(modules) == 2:  # the good entry's module and the cut entries' "crafted"
                break
            time.sleep(0.2)
        assert "crafted" in modules and len(modules) == 2, (modules, server.log()[-3000:])
        started = time.monotonic()
        assert client.get("/admin/graphs", params={"namespace": "probe"}).status_code == 200
        report_seconds = time.monotonic() - started

        def unparseable() -> dict[str, int]:  # the report counts them by reason (parsed in batches)
            answer = client.get("/admin/graphs", params={"namespace": "probe"})
            found = {group["reason"]: group["entries"] for group in answer.json()["unparseable"]}
            return found if sum(found.values()) == 150 else {}

        # each crafted entry is recorded with the bound it broke
        assert wait_until(
            unparseable, timeout=60, interval=QUIET_POLL, message=lambda: f"{unparseable()}"
        ) == {
            "tuple shapes nested deeper than 32": 100,
            "more than 100000 computations fields": 50,
        }
        for _ in range(20):
            _healthz(client, healthz)
        log = server.log()
    print(f"report {report_seconds:.3f} s; healthz max {max(healthz):.3f} s of {len(healthz)}")
    assert report_seconds < 2.0
    assert max(healthz) < 0.1, sorted(healthz)[-5:]
    assert "parsing it an entry at a time" not in log or "recorded as unparseable" in log
