"""``xla-cache doctor``: can this torch_xla load its own persistent-cache entries?

torch_xla 2.8 and 2.9 write entries they cannot load (pytorch/xla #9094, #8930), and nothing says so: the
job just compiles everything again. The doctor finds out for real: one process compiles a few graphs into an
empty cache directory, a second process runs the same graphs from it, and the second one's counters say
whether every graph was loaded (``PersistentCacheHit``) or failed to load
(``PersistentCacheDeserializeFailure``). It also checks the server when one is configured, and when this
runtime's namespace is empty or thin there, names the nearest populated namespace and how it differs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from xla_cache.config import ClientConfig
from xla_cache.errors import ServerError, ServerProblem
from xla_cache.frameworks.torch_xla import deserialize_failure_cause
from xla_cache.http.api import CacheApi
from xla_cache.http.deadline import Deadline
from xla_cache.transfer.nearest import NearNamespace, ask_nearest

__all__ = ["DoctorReport", "JobRunner", "judge", "run_doctor", "run_selftest_job"]

JobRunner = Callable[[Path, float], dict[str, Any]]


@dataclass
class DoctorReport:
    """The self-test's verdict and its evidence."""

    loads_own_entries: bool | None  # None: the self-test could not run
    verdict: str
    torch_xla_version: str | None = None
    namespace: str | None = None
    first_run: dict[str, Any] = field(default_factory=dict)
    second_run: dict[str, Any] = field(default_factory=dict)
    server: str | None = None
    server_ready: bool | None = None
    server_error: str | None = None
    namespace_entries: int | None = None  # what the server holds in this runtime's namespace
    nearest: list[NearNamespace] = field(default_factory=list)  # when that is empty or thin
    seconds: list[float] = field(default_factory=list)  # what each self-test process took

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _import_root() -> str:
    """The folder that holds the ``xla_cache`` package (site-packages, or client/ in a checkout)."""
    return str(Path(__file__).resolve().parents[2])


def run_selftest_job(directory: Path, timeout: float) -> dict[str, Any]:
    """Run one self-test process on ``directory``; its JSON result, or ``{"error": ...}``."""
    env = dict(os.environ)
    env.pop("XLA_PERSISTENT_CACHE_PATH", None)
    env.pop("XLA_PERSISTENT_CACHE_READ_ONLY", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_import_root(), env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "xla_cache.cli._selftest_job", str(directory)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the self-test process did not finish within {timeout:g} s"}
    for line in reversed(done.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except ValueError:
                continue
            if isinstance(result, dict):
                return result
    tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
    return {"error": f"the self-test process exited with {done.returncode}: " + " | ".join(tail)}


def judge(first: Mapping[str, Any], second: Mapping[str, Any]) -> tuple[bool | None, str]:
    """The verdict from the two runs' results."""
    if "error" in first or "error" in second:
        return None, f"the self-test could not run: {first.get('error') or second.get('error')}"
    version = str(second.get("torch_xla_version") or first.get("torch_xla_version") or "")
    graphs = int(first.get("graphs", 0))
    if not first.get("entries"):
        return False, f"torch_xla {version} wrote no persistent-cache entries, so there is nothing to share"
    counters = second.get("counters", {})
    hits = int(counters.get("PersistentCacheHit", 0))
    failures = int(counters.get("PersistentCacheDeserializeFailure", 0))
    compiles = int(counters.get("UncachedCompile", 0))
    if failures:
        return False, (
            f"a second process failed to load {failures} of {graphs} entries the first wrote: "
            + deserialize_failure_cause(version)
        )
    if first.get("outputs") != second.get("outputs"):
        return False, "the second process computed different results from the cached executables"
    if hits >= graphs and compiles == 0:
        return True, (
            f"torch_xla {version} loads its own entries: a second process ran all {graphs} graphs from the "
            "persistent cache and compiled none"
        )
    return False, (
        f"a second process loaded only {hits} of {graphs} graphs from the cache and compiled {compiles}; "
        "the cache key is not stable across processes here"
    )


def run_doctor(
    *,
    server: str | None = None,
    token: str | None = None,
    timeout: float = 300.0,
    runner: JobRunner = run_selftest_job,
) -> DoctorReport:
    """Run the two-process self-test (and check the server if one is given)."""
    with tempfile.TemporaryDirectory(prefix="xla-cache-doctor-") as temp:
        directory = Path(temp)
        seconds = []
        started = time.monotonic()
        first = runner(directory, timeout)
        seconds.append(round(time.monotonic() - started, 1))
        second: dict[str, Any] = {}
        if "error" not in first:
            started = time.monotonic()
            second = runner(directory, timeout)
            seconds.append(round(time.monotonic() - started, 1))
    loads, verdict = judge(first, second)
    report = DoctorReport(
        loads_own_entries=loads,
        verdict=verdict,
        torch_xla_version=first.get("torch_xla_version"),
        namespace=first.get("namespace"),
        first_run=dict(first),
        second_run=dict(second),
        seconds=seconds,
    )
    config = ClientConfig.resolve(server, token)
    if config.server:
        with CacheApi(config.server, config.token, compression=config.compression) as api:
            report.server = api.server
            try:
                api.ready(Deadline(10.0))
                report.server_ready = True
                _namespace_state(api, report, first.get("fingerprint"))
            except ServerProblem as exc:
                report.server_ready = False
                report.server_error = exc.reason
    return report


def _namespace_state(api: CacheApi, report: DoctorReport, fingerprint: object) -> None:
    """How many entries the server holds in the self-test runtime's namespace, and when that is few, the
    nearest populated namespaces (fail-open, as for a warm)."""
    if not report.namespace or not isinstance(fingerprint, dict):
        return
    try:
        report.namespace_entries = int(api.get_namespace(report.namespace, Deadline(10.0))["entries"])
    except ServerError as exc:
        if exc.status != 404:  # 404: never registered, so it holds nothing
            return
        report.namespace_entries = 0
    except ServerProblem:
        return
    except (KeyError, TypeError, ValueError):
        return
    report.nearest = ask_nearest(api, report.namespace, fingerprint, report.namespace_entries, Deadline(10.0))
