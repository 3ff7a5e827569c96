"""The README documents every setting the server reads."""

from __future__ import annotations

from pathlib import Path

from cache_server.settings import Settings

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_setting_is_in_the_readme() -> None:
    text = README.read_text()
    undocumented = [name for name in Settings.model_fields if f"XLA_CACHE_{name.upper()}" not in text]
    assert undocumented == []
