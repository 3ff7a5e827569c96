"""At interpreter exit the uploader sends what the job compiled, within its bound, without flush()."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.fake_server import FakeCacheServer

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import json, logging, os, sys
from pathlib import Path
from xla_cache import warming
from xla_cache.frameworks import all_frameworks
from xla_cache.frameworks.torch_xla import TorchXla

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")


class StandIn(TorchXla):
    # torch_xla as the job sees it (the real thing is in tests/e2e): the cache is "initialized" by name.

    def require(self): return None
    def check_not_too_late(self, directory=None): return None
    def initialize(self, directory, *, all_compilations=True): return None
    def compile_times(self, files): return {}
    def spmd_now(self): return None
    def load_failures(self): return 0


all_frameworks()["torch_xla"] = StandIn()
url, base, fingerprint = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
report = warming.warm(url, base, fingerprint=fingerprint, timeout=float(sys.argv[4]))
Path(report.cache_dir, "123456789").write_bytes(b"compiled at the very end")
print(report.cache_dir, flush=True)
"""


def run(
    url: str, base: Path, fingerprint: dict[str, Any], timeout: float
) -> subprocess.CompletedProcess[str]:
    import json

    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", JOB, url, str(base), json.dumps(fingerprint), str(timeout)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_exit_handler_uploads_the_last_entries(
    fake_server: FakeCacheServer, fingerprint: dict[str, Any], namespace: str, tmp_path: Path
) -> None:
    done = run(fake_server.url, tmp_path, fingerprint, 10.0)
    assert done.returncode == 0, done.stderr
    assert fake_server.entries[namespace]["123456789"] == b"compiled at the very end"
    assert "uploaded 1 new entries" in done.stderr


def test_exit_with_a_hung_server_costs_one_timeout_not_two(
    fake_server: FakeCacheServer, fingerprint: dict[str, Any], tmp_path: Path
) -> None:
    fake_server.hang = True
    started = time.monotonic()
    done = run(fake_server.url, tmp_path, fingerprint, 2.0)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert seconds < 2.0 + 6.0  # the warm's timeout, plus interpreter start-up on a loaded machine
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING xla_cache")]
    assert len(warnings) == 1 and "did not" in warnings[0]
