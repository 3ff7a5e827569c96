"""The client's public paths, as the benchmark calls them: ``xla-cache push`` and ``warm()``.

Push goes through the CLI's own entry point (``xla_cache.cli.main``), so it measures whatever the CLI does
(one PUT per entry today, the bulk endpoint once the client moves to it). Warm calls ``xla_cache.warm`` with
an explicit fingerprint and ``initialize=False``: the download path of a job, without importing torch_xla.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.data import CacheDir

__all__ = ["PushOutcome", "WarmOutcome", "push", "warm"]


@dataclass
class PushOutcome:
    uploaded: int = 0
    already_present: int = 0
    errors: list[str] = field(default_factory=list)
    exit_code: int = 0


@dataclass
class WarmOutcome:
    downloaded: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)


def push(server: str, cache: CacheDir, *, timeout: float) -> PushOutcome:
    """``xla-cache push --namespace NS --json`` of ``cache`` (its output is captured, not printed)."""
    from xla_cache.cli import main

    out = io.StringIO()
    argv = [
        "push",
        *("--server", server, "--cache-dir", str(cache.base), "--namespace", cache.namespace),
        *("--timeout", str(timeout), "--json", "--no-progress"),
    ]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    outcome = PushOutcome(exit_code=code)
    try:
        report: dict[str, Any] = json.loads(out.getvalue())
    except ValueError:
        outcome.errors.append(f"xla-cache push exited {code} without a JSON report")
        return outcome
    for row in report.get("namespaces", []):
        outcome.uploaded += int(row.get("uploaded", 0))
        outcome.already_present += int(row.get("already_present", 0))
        outcome.errors += [str(e) for e in row.get("errors", [])]
        if "error" in row:
            outcome.errors.append(str(row["error"]))
    return outcome


def warm(server: str, cache: CacheDir, destination: Path, *, timeout: float) -> WarmOutcome:
    """``xla_cache.warm`` of ``cache``'s namespace into ``destination`` (no framework set up, no uploader)."""
    from xla_cache.warming import warm as client_warm

    report = client_warm(
        server,
        destination,
        initialize=False,
        upload=False,
        timeout=timeout,
        fingerprint=cache.fingerprint,
    )
    return WarmOutcome(report.downloaded_entries, report.downloaded_bytes, list(report.errors))
