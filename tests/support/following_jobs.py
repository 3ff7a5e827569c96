"""Two real jobs started together against one server, both following, for the follow end-to-end tests of
tests/e2e (torch_xla) and tests/jax."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["run_following_pair"]


def run_following_pair(
    script: Path, server_url: str, tmp_path: Path, shapes: int, *, env: Mapping[str, str], timeout: float
) -> list[dict[str, Any]]:
    """Start ``script`` twice at once with ``--follow``, each with a cache directory of its own under
    ``tmp_path`` and the ``shapes`` in its own order (seeds 1 and 2); each one's JSON result, once both
    have succeeded."""
    jobs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                "--server",
                server_url,
                "--cache-dir",
                str(tmp_path / f"job{seed}"),
                "--shapes",
                str(shapes),
                "--order-seed",
                str(seed),
                "--follow",
            ],
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    results = []
    for job in jobs:
        out, err = job.communicate(timeout=timeout)
        assert job.returncode == 0, err[-4000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results
