"""Tests that need a large optional part of the test environment (torch_xla, JAX) or an outside tool."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

import pytest

__all__ = ["require_binary", "require_module"]


def _missing(message: str) -> NoReturn:
    """Skip the test on a developer machine; FAIL it when ``CI`` is set.

    ``scripts/test`` installs the whole test environment, so in CI a missing part is a broken setup, never a
    reason to pass.
    """
    if os.environ.get("CI"):
        pytest.fail(message + "; in CI this is a failure, not a skip")
    pytest.skip(message)


def require_module(module: str, message: str) -> None:
    """Skip the test when ``module`` is not installed (a failure in CI)."""
    if importlib.util.find_spec(module) is None:
        _missing(message)


def require_binary(name: str, message: str) -> str:
    """The path of the program ``name``: the test environment's own ``bin/`` first, then ``PATH``.

    Skips the test when it is in neither (a failure in CI).
    """
    beside = Path(sys.executable).with_name(name)
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        _missing(message)
    return found
