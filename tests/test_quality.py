"""The code stays typed and linted: mypy strict on the packages, ruff over the whole tree."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [["mypy"], ["ruff", "check", "."], ["ruff", "format", "--check", "."]],
    ids=["mypy", "ruff-check", "ruff-format"],
)
def test_clean(command: list[str]) -> None:
    result = subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module the file imports (absolute names), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, node.module or ""))
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_routes_reach_the_index_only_through_services() -> None:
    """No module of the HTTP layer (cache_server/api/) imports the index: routes ask services."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "cache_server" / "api").rglob("*.py"))
        for line, name in _imports(path)
        if _within(name, "cache_server.index")
    ]
    assert offenders == []


def test_the_index_and_the_vocabulary_import_nothing_above_them() -> None:
    """The index (cache_server/index/) and the vocabulary it stores (cache_server/domain/) import only each
    other, the errors and the settings from the server: nothing of the services, runs, graphs, admin, auth
    or HTTP rooms, which stand above them."""
    allowed = ("cache_server.index", "cache_server.domain", "cache_server.errors", "cache_server.settings")
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {name}"
        for room in ("index", "domain")
        for path in sorted((ROOT / "cache_server" / room).rglob("*.py"))
        for line, name in _imports(path)
        if _within(name, "cache_server") and not any(_within(name, ok) for ok in allowed)
    ]
    assert offenders == []


def test_the_run_collectors_vocabulary_imports_no_collector() -> None:
    """What a run collector counts (xla_cache/runs/collectors.py) imports none of the collectors nor the
    reporter: they import it, and no import circle runs through the client's runs room."""
    path = ROOT / "client" / "xla_cache" / "runs" / "collectors.py"
    offenders = [f"{line} {name}" for line, name in _imports(path) if _within(name, "xla_cache.runs")]
    assert offenders == []


def test_administration_imports_no_parsing() -> None:
    """Parsing the stored entries is a service of its own (cache_server/parsing/, built in wiring, notified by
    uploads directly): no module of the admin room imports it."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {name}"
        for path in sorted((ROOT / "cache_server" / "admin").rglob("*.py"))
        for line, name in _imports(path)
        if _within(name, "cache_server.parsing")
        or _within(name, "cache_server.parsing.service")
        or _within(name, "cache_server.parsing.worker")
    ]
    assert offenders == []
