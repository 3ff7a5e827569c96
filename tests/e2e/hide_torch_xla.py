"""A pytest plugin that makes torch_xla look uninstalled (for test_requires_torch_xla)."""

from __future__ import annotations

import importlib.util
from typing import Any

_real_find_spec = importlib.util.find_spec


def _find_spec(name: str, package: str | None = None) -> Any:
    if name == "torch_xla" or name.startswith("torch_xla."):
        return None
    return _real_find_spec(name, package)


importlib.util.find_spec = _find_spec
