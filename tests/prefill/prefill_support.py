"""What the prefill tests share: the ``xla-cache prefill`` command run as a user runs it, a specs file,
and the server's view of a namespace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.support.auto_jobs import ROOT, clean_env
from tests.support.server import LiveServer

CLI = Path(sys.executable).with_name("xla-cache")
TIMEOUT = 600


def specs_file(where: Path, calls: list[Any], function: str | None = None) -> Path:
    body: dict[str, Any] = {"calls": calls}
    if function:
        body["function"] = function
    where.write_text(json.dumps(body))
    return where


def prefill_command(server: LiveServer, specs: Path, *extra: str) -> list[str]:
    return [str(CLI), "prefill", "--specs", str(specs), "--server", server.url, "--json", *extra]


def env(**extra: str) -> dict[str, str]:
    return clean_env(**extra)


def run_prefill(server: LiveServer, specs: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    """Run ``xla-cache prefill`` to its end: its exit status, its JSON summary ({} if none) and stderr."""
    done = subprocess.run(
        prefill_command(server, specs, *extra),
        env=env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    summary = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, summary, done.stderr


def server_keys(server: LiveServer, namespace: str) -> set[str]:
    answer = httpx.get(f"{server.url}/v1/namespaces/{namespace}/manifest", timeout=30)
    if answer.status_code == 404:
        return set()
    answer.raise_for_status()
    return {entry["key"] for entry in answer.json()["entries"]}


def entry_bytes(server: LiveServer, namespace: str, key: str) -> bytes:
    answer = httpx.get(f"{server.url}/v1/namespaces/{namespace}/entries/{key}", timeout=30)
    answer.raise_for_status()
    return answer.content
