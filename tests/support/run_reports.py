"""Run reports as the tests write and read them: a ``POST /v1/runs`` body, and a run's detail once the server
has explained each compile."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.support.wait import QUIET_POLL, wait_until

__all__ = ["explained_run", "run_report"]


def run_report(run_id: str = "run-00000001", **fields: Any) -> dict[str, Any]:
    """A ``POST /v1/runs`` body: process 0 of a torch_xla run in namespace ``cpu-job``, started a minute ago
    on ``host-1``, with no hits or misses yet; ``fields`` over any of that."""
    body: dict[str, Any] = {
        "run_id": run_id,
        "namespace": "cpu-job",
        "framework": "torch_xla",
        "host": "host-1",
        "process_index": 0,
        "started_at": time.time() - 60,
        "hits": 0,
        "misses": 0,
    }
    return {**body, **fields}


def explained_run(server_url: str, run_id: str) -> dict[str, Any]:
    """``GET /admin/runs/RUN_ID`` once the server has parsed the uploaded entries' shapes (in the background:
    until then a compile's reason is "unknown"): the run with each compile's reason."""
    found: dict[str, Any] = {}

    def explained() -> bool:
        answer = httpx.get(f"{server_url}/admin/runs/{run_id}", timeout=30)
        assert answer.status_code == 200, answer.text
        found.update(answer.json())
        return all(miss["reason"] != "unknown" for miss in found["misses"])

    wait_until(
        explained, timeout=30, interval=QUIET_POLL, message="the run's compiles were not explained in time"
    )
    return found
