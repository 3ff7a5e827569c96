"""Real torch_xla 2.7 CPU cache entries (tests/admin/fixtures), for the graph parser, stats and eviction."""

from __future__ import annotations

from pathlib import Path

__all__ = ["FIXTURES", "real_entries"]

FIXTURES = Path(__file__).parent.parent / "admin" / "fixtures" / "torch_xla_2.7_cpu"


def real_entries() -> dict[str, bytes]:
    """Four real torch_xla 2.7 CPU entries: three shape variants of one graph and one other graph."""
    return {path.name: path.read_bytes() for path in sorted(FIXTURES.iterdir())}
