"""A prefill for a TPU topology, deviceless, kept as test data (``fixtures/make_tpu_prefill.py`` made it in
an environment of its own with libtpu 0.0.42.1; libtpu is no test dependency): its namespace is the TPU
job's (platform, device kind, topology), never the CPU host's; ``graphs`` reads its entries and says they
are prefilled and unverified; and a real run of the namespace that recorded another component (a fixture:
no TPU ran here) makes the prefill refuse, naming it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.prefill.prefill_support import CLI, env
from tests.support.auto_jobs import ROOT
from tests.support.server import LiveServer
from tests.support.wait import wait_until
from xla_cache.frameworks.jax import check_entry
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.http.api import CacheApi
from xla_cache.http.deadline import Deadline
from xla_cache.localcache.cachedir import LocalFile
from xla_cache.prefill import PrefillRefused
from xla_cache.prefill.run import check_target
from xla_cache.transfer.upload import upload_entries

pytestmark = [pytest.mark.e2e]

FIXTURES = Path(__file__).parent / "fixtures"
KEPT = FIXTURES / "jax_0.10.2_tpu_prefill"
RECORD: dict[str, Any] = json.loads((KEPT / "prefill.json").read_text())
DIFFERING_RUN: dict[str, Any] = json.loads((FIXTURES / "tpu_real_run_differing.json").read_text())


def test_the_namespace_is_the_tpu_jobs_not_the_hosts() -> None:
    assert RECORD["versions"] == {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1"}
    fingerprint, components = RECORD["fingerprint"], RECORD["components"]
    assert RECORD["namespace"] == namespace_id(fingerprint)  # the id a v5e:2x2 job computes from these
    assert RECORD["namespace"].startswith("tpu-jax0.10.2-")
    assert (fingerprint["platform"], fingerprint["device_kind"]) == ("tpu", "TPU v5 lite")
    assert (fingerprint["device_count"], fingerprint["local_device_count"], fingerprint["process_count"]) == (
        4,
        4,
        1,
    )
    assert fingerprint["topology"] == {"extent": [2, 2, 1], "slices": 1}
    assert fingerprint["pjrt_plugins"] == {"libtpu": "0.0.42.1"}
    assert "TPU v5 lite" in fingerprint["platform_version"]
    assert components["devices"] == [[0, [0, 0, 0]], [1, [1, 0, 0]], [2, [0, 1, 0]], [3, [1, 1, 0]]]
    assert components["xla_caches"] == "none"  # the key holds no cache directory's path
    assert len(RECORD["entries"]) == len(RECORD["calls"]) == 6
    for entry in RECORD["entries"]:
        data = (KEPT / entry["key"]).read_bytes()
        assert len(data) == entry["bytes"]
        check_entry([data])  # whole
        assert entry["prefilled"].startswith("prefill host=")
        assert entry["prefilled"].endswith(" deviceless topology=v5e:2x2 unverified")


def _publish(server: LiveServer) -> str:
    """Store the kept entries as the prefill stored them: the namespace with its fingerprint, each entry
    with its mark."""
    namespace = RECORD["namespace"]
    with CacheApi(server.url) as api:
        api.register_namespace(namespace, RECORD["fingerprint"], {}, Deadline(30))
        files = [
            LocalFile(entry["key"], KEPT / entry["key"], entry["bytes"], 0) for entry in RECORD["entries"]
        ]
        done = upload_entries(api, namespace, files, Deadline(60), uploader=RECORD["entries"][0]["prefilled"])
    assert done.stored == 6 and not done.errors
    return namespace


def test_graphs_reads_the_prefilled_tpu_entries(live_server: LiveServer) -> None:
    namespace = _publish(live_server)

    def report() -> dict[str, Any] | None:
        answer = httpx.get(f"{live_server.url}/admin/graphs", params={"namespace": namespace}, timeout=30)
        body: dict[str, Any] = answer.json()
        return body if body.get("graphs") else None

    found = wait_until(report, timeout=120, interval=0.5, message="the TPU entries were never parsed")
    assert found is not None
    (graph,) = found["graphs"]
    assert graph["module"] == "jit__step" and graph["entries"] == 6
    assert (found["prefilled_entries"], found["prefilled_unverified"]) == (6, 6)
    shown = subprocess.run(
        [str(CLI), "graphs", namespace, "--server", live_server.url],
        env=env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "6 entries prefilled (compiled ahead of the target job) (6 unverified" in shown


def test_a_real_run_that_recorded_another_component_makes_the_prefill_refuse(live_server: LiveServer) -> None:
    namespace = RECORD["namespace"]
    with CacheApi(live_server.url) as api:
        with pytest.raises(PrefillRefused, match="no real run"):
            check_target(api, namespace, RECORD["components"], False, 30)

        # The real v5e:2x2 job reports its components (here a fixture: another libtpu build).
        report = {
            "run_id": DIFFERING_RUN["run_id"],
            "namespace": namespace,
            "framework": DIFFERING_RUN["framework"],
            "host": DIFFERING_RUN["host"],
            "started_at": time.time(),
            "runtime": DIFFERING_RUN["runtime"],
        }
        httpx.post(f"{live_server.url}/v1/runs", json=report, timeout=30).raise_for_status()
        with pytest.raises(PrefillRefused) as refused:
            check_target(api, namespace, RECORD["components"], False, 30)
        said = str(refused.value)
        assert "tpu-real-run-0001" in said and "platform_version: prefill 'PJRT C API" in said
        assert "devices" not in said and "topology" not in said  # only what differs is named
        note, unverified = check_target(api, namespace, RECORD["components"], True, 30)
        assert unverified and "platform_version" in note

        # A later run that agrees verifies it.
        agreeing = {**report, "run_id": "tpu-real-run-0002", "runtime": RECORD["components"]}
        agreeing["started_at"] = time.time() + 1
        httpx.post(f"{live_server.url}/v1/runs", json=agreeing, timeout=30).raise_for_status()
        note, unverified = check_target(api, namespace, RECORD["components"], False, 30)
        assert not unverified and note.startswith("verified") and "tpu-real-run-0002" in note
