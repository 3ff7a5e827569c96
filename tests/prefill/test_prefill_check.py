"""``xla-cache doctor --prefill-check``, the check a TPU user runs once: on this CPU host the live compile
and the prefill worker's agree (namespace, key components, key); asked for a TPU topology where libtpu is
not installed, it fails and says why. (On a TPU host its JSON is what to send us: no TPU ran here.)"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.prefill.prefill_support import CLI, env
from tests.support.auto_jobs import ROOT
from tests.support.needs import require_module

pytestmark = [pytest.mark.e2e]


def doctor(*extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), "doctor", "--prefill-check", *extra],
        env=env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_live_and_the_prefill_compile_agree_on_this_host() -> None:
    require_module("jax", "jax is not installed (scripts/test installs jax 0.10)")
    done = doctor("--json")
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert found["passed"] and found["same_key"] and found["differing"] == []
    assert found["topology"] is None  # a CPU host: the worker compiles for this host
    live, deviceless = found["live"], found["deviceless"]
    assert live["key"] == deviceless["key"] and live["key"].startswith("jit__probe-")
    assert found["namespaces"][0] == found["namespaces"][1]
    assert live["components"] == deviceless["components"]


def test_a_topology_without_libtpu_fails_saying_why() -> None:
    require_module("jax", "jax is not installed (scripts/test installs jax 0.10)")
    done = doctor("--topology", "v5e:2x2")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "passed       NO" in done.stdout
    assert (
        "the deviceless compile failed: RuntimeError: cannot describe TPU topology 'v5e:2x2'" in done.stdout
    )
