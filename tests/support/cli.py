"""Running the ``xla-cache`` command line inside a test and reading what it printed."""

from __future__ import annotations

import pytest

from xla_cache.cli import main

__all__ = ["run_cli"]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``xla-cache ARGS``: its exit code, and what it wrote to stdout and stderr."""
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err
