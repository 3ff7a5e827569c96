"""The docs stay true: the generated references match the code, the site builds in strict mode, the layout
page names every module, and the README stays a quickstart."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from cache_protocol.runs import MISS_ADVICE
from cache_server.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_references_match_the_code() -> None:
    for path, text in _generator().rendered().items():
        committed = path.read_text() if path.exists() else ""
        assert committed == text, f"{path.relative_to(ROOT)} is stale: run python scripts/docs_reference.py"


def test_every_setting_is_in_the_settings_reference() -> None:
    text = (DOCS / "reference" / "settings.md").read_text()
    undocumented = [name for name in Settings.model_fields if f"`XLA_CACHE_{name.upper()}`" not in text]
    assert undocumented == []


def test_every_variable_the_client_reads_is_in_the_settings_reference() -> None:
    text = (DOCS / "reference" / "settings.md").read_text()
    read = {
        name
        for path in sorted((ROOT / "client" / "xla_cache").rglob("*.py"))
        for name in re.findall(r"\bXLA_CACHE_[A-Z_]*[A-Z]\b", path.read_text())
    }
    server = {f"XLA_CACHE_{name.upper()}" for name in Settings.model_fields}
    assert sorted(name for name in read - server if f"`{name}`" not in text) == []


def test_every_setting_is_in_one_section_in_the_class_order() -> None:
    from cache_server.settings import SECTIONS

    listed = [name for _, names in SECTIONS for name in names]
    assert listed == list(Settings.model_fields)  # each once, in the order the class declares them


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "reference" / "settings" / "index.html").exists()


def test_the_nav_lists_every_page() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    assert [page for page in pages if f": {page}\n" not in config] == []


def test_the_folder_map_names_every_module_of_the_server_and_the_client() -> None:
    text = (DOCS / "layout.md").read_text()
    folders = text[text.index("## Folders") :]
    modules = [
        path
        for package in (ROOT / "cache_server", ROOT / "client" / "xla_cache")
        for path in sorted(package.rglob("*.py"))
        if not path.name.startswith("__")
    ]
    unnamed = [str(path.relative_to(ROOT)) for path in modules if path.name not in folders]
    assert unnamed == []


def test_the_routes_through_the_house_name_files_and_functions_that_exist() -> None:
    text = (DOCS / "layout.md").read_text()
    routes = text[text.index("## Two routes through the house") : text.index("## Folders")]
    hops = re.findall(r"`([\w/<>]+\.py)` `([\w.]+)`", routes)
    assert len(hops) >= 10
    missing = []
    for file, name in hops:
        path = ROOT / "cache_server" / file
        source = path.read_text() if path.is_file() else ""
        for part in name.split("."):  # a class and its method: both defined there
            if not re.search(rf"^\s*(?:async )?(?:def|class) {re.escape(part)}\b", source, re.M):
                missing.append(f"{file} {name}")
    assert missing == []


def test_the_readme_is_a_quickstart() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 220
    needed = ("./scripts/serve", "./scripts/test", "import xla_cache", "xla_cache.warm(", "xla-cache doctor")
    assert [line for line in needed if line not in text] == []
    linked = re.findall(r"\]\((docs/[^)#]+)", text)
    assert linked and [link for link in linked if not (ROOT / link).exists()] == []


def test_the_baked_sizes_advice_links_to_the_page_that_shows_the_fix() -> None:
    page = "fixing-baked-sizes.md"
    assert (DOCS / page).exists()
    assert page in (ROOT / "mkdocs.yml").read_text()
    assert f"docs/{page}" in MISS_ADVICE["baked_sizes"]
