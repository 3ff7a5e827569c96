"""Running the ``xla-cache`` command line inside a test and reading what it printed: in process
(:func:`run_cli`), or as the installed console script in a process of its own (:func:`run_xla_cache`)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from xla_cache.cli import main

__all__ = ["XLA_CACHE_BIN", "run_cli", "run_xla_cache", "xla_cache_env"]

XLA_CACHE_BIN = Path(sys.executable).with_name("xla-cache")


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``xla-cache ARGS``: its exit code, and what it wrote to stdout and stderr."""
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def xla_cache_env(env: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without its ``XLA_CACHE_*`` variables, and ``env`` over it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    return {**clean, **env}


def run_xla_cache(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``xla-cache ARGS`` to its end, with the ``XLA_CACHE_*`` variables of ``env`` (none of the
    shell's), its output captured."""
    return subprocess.run(
        [str(XLA_CACHE_BIN), *args],
        env=xla_cache_env(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
