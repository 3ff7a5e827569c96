"""Tests that need a large optional part of the test environment (torch_xla, JAX)."""

from __future__ import annotations

import importlib.util
import os

import pytest

__all__ = ["require_module"]


def require_module(module: str, message: str) -> None:
    """Skip the test when ``module`` is not installed, on a developer machine; FAIL it when ``CI`` is set.

    ``scripts/test`` installs the whole test environment, so in CI a missing module is a broken setup, never
    a reason to pass.
    """
    if importlib.util.find_spec(module) is not None:
        return
    if os.environ.get("CI"):
        pytest.fail(message + "; in CI this is a failure, not a skip")
    pytest.skip(message)
