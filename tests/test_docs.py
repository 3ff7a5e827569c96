"""The README documents every setting the server reads."""

from __future__ import annotations

from pathlib import Path

from cache_server.settings import Settings

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_setting_is_in_the_readme() -> None:
    text = README.read_text()
    undocumented = [name for name in Settings.model_fields if f"XLA_CACHE_{name.upper()}" not in text]
    assert undocumented == []


def test_the_folder_map_names_every_module_of_the_server_and_the_client() -> None:
    text = README.read_text()
    folders = text[text.index("## Folders") :]
    server, client = README.parent / "cache_server", README.parent / "client" / "xla_cache"
    packages = (
        server,
        server / "index",
        server / "admin",
        server / "api",
        server / "service",
        server / "storage",
        server / "cli",
        server / "auth",
        server / "background",
    )
    packages += (
        server / "storage" / "local",
        server / "storage" / "gcs",
        client,
        client / "frameworks",
        client / "cli",
    )
    modules = [
        path for folder in packages for path in sorted(folder.glob("*.py")) if not path.name.startswith("__")
    ]
    unnamed = [str(path.relative_to(README.parent)) for path in modules if path.name not in folders]
    assert unnamed == []
