"""The code stays typed and linted: mypy strict on the packages, ruff over the whole tree."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cache_protocol.runs import MISS_REASONS
from cache_server.runs import reasons
from cache_server.service import facade

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


CLIENT = ROOT / "client" / "xla_cache"
# The client's rooms, each above the rooms it may import (issue 47, item 5); the command line (cli/) stands
# above them all and the frame's warm, and imports what it likes.
_CLIENT_ROOMS_BELOW = {
    "localcache": (),
    "http": (),
    "frameworks": ("localcache",),
    "transfer": ("localcache", "http", "frameworks"),
    "runs": ("localcache", "http", "frameworks", "transfer"),
    "prefill": ("localcache", "http", "frameworks", "transfer"),
}
# What of the client's root a room may import: the frame's vocabulary, never the warm nor the entry points.
_CLIENT_VOCABULARY = ("config", "config_file", "server_url", "errors", "logs", "warm_report")


def test_the_client_root_holds_only_its_frame() -> None:
    """Issue 47, item 5: client/xla_cache/ keeps the public frame (warm, its report, config, errors, the
    logger, the entry points) at its root, at most 10 modules; the rest lives in rooms named by concept."""
    modules = sorted(path.name for path in CLIENT.glob("*.py"))
    assert len(modules) <= 10, modules
    rooms = sorted(path.name for path in CLIENT.iterdir() if (path / "__init__.py").is_file())
    assert rooms == sorted([*_CLIENT_ROOMS_BELOW, "cli"])


def test_each_client_room_imports_only_the_rooms_below_it() -> None:
    """A room of the client imports the rooms below it and the root's vocabulary, nothing above it: no
    import climbs back up from the local cache to the HTTP client, the transfers, the runs or the frame."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {name}"
        for room, below in _CLIENT_ROOMS_BELOW.items()
        for path in sorted((CLIENT / room).rglob("*.py"))
        for line, name in _imports(path)
        if _within(name, "xla_cache")
        and not _within(name, f"xla_cache.{room}")
        and not any(_within(name, f"xla_cache.{ok}") for ok in (*below, *_CLIENT_VOCABULARY))
    ]
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


# What writes text into a page, or parses it as HTML.
_WRITES_TEXT = re.compile(
    r"\.textContent\s*=(?!=)|createTextNode\(|\.(?:inner|outer)HTML\b|insertAdjacent(?:HTML|Text)|document\.write"
    r"|\.(?:title|ariaLabel|nodeValue|data|innerText|outerText)\s*=(?!=)|\.setAttribute\("
)
# page.js's doors, through printable: the only functions that write text themselves, defined there only
_DOORS = ("setText", "textNode", "setLines", "setAttributes")
_DOORS_HOME = "page.js"
# what stands behind the doors, defined once, in page.js, for every page (dashboard.js, docs.js) to share
_DOORS_SHARED = ("printable", "el", *_DOORS, "UNPRINTABLE", "SHOWN_ATTRIBUTES")
_SHOWN_ATTRIBUTES = ("title", "aria-label", "alt", "placeholder")


def _text_writes_outside_the_doors(path: Path) -> list[str]:
    """Each line of ``path`` writing text or a shown attribute outside a door's body (in page.js)."""
    found_lines = []
    door = False  # within one of the doors' bodies
    for number, line in enumerate(path.read_text().splitlines(), 1):
        opened = re.match(r"function (\w+)\(", line)
        if opened:
            is_door = path.name == _DOORS_HOME and opened.group(1) in _DOORS
            door = is_door and not line.rstrip().endswith("}")
            if is_door:
                continue
        elif door:
            door = not line.startswith("}")
            continue
        for found in _WRITES_TEXT.finditer(line):
            literal = re.match(r"\.setAttribute\(\"([\w-]+)\"", line[found.start() :])
            if literal and literal.group(1) not in _SHOWN_ATTRIBUTES:
                continue
            found_lines.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
            break
    return found_lines


def test_the_dashboard_writes_text_only_through_its_escaping_function() -> None:
    """Issue 42, item 8: every text the server's pages show (the dashboard, the API page: every
    static/*.js) goes through one function (``printable`` in page.js, by the doors named above), so a bidi
    override or a control character a client sent is shown escaped wherever it is drawn; nothing is parsed
    as HTML. A ``setAttribute`` outside them names an attribute nobody reads (an href, a coordinate). The
    doors are page.js's alone: a second copy elsewhere could drift from the first."""
    scripts = sorted((ROOT / "cache_server" / "static").glob("*.js"))
    assert _DOORS_HOME in {path.name for path in scripts}
    offenders = [line for path in scripts for line in _text_writes_outside_the_doors(path)]
    defined = [
        f"{path.name} {name}"
        for path in scripts
        for name in re.findall(r"^(?:function|const|let|var) (\w+)\b", path.read_text(), flags=re.M)
        if name in _DOORS_SHARED
    ]
    assert offenders == []
    assert sorted(defined) == sorted(f"{_DOORS_HOME} {name}" for name in _DOORS_SHARED)


def test_no_repository_inherits_another() -> None:
    """Repositories compose: a class of the index derives from no class of the index (the tables' declarative
    base in models.py aside); shared queries are functions or small collaborators."""
    index = ROOT / "cache_server" / "index"
    defined = {
        node.name
        for path in index.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({ast.unparse(base)})"
        for path in sorted(index.rglob("*.py"))
        if path.name != "models.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        for base in node.bases
        if ast.unparse(base) in defined
    ]
    assert offenders == []


def test_the_cache_service_writes_out_each_method_it_offers() -> None:
    """Every method the facade's table names (cache_server/service/facade.py) is a method written out on
    CacheService, typed, with a docstring (not a concept's method bound as an attribute when the service is
    built): a reader, or a tool that follows calls, goes from a route through it into the concept's module."""
    table = next(part for part in (facade.__doc__ or "").split("\n\n") if part.startswith("===="))
    named = re.findall(r"``(\w+)``", table)
    assert len(named) >= 16, named
    offenders = []
    for name in named:
        method = facade.CacheService.__dict__.get(name)
        if not inspect.isfunction(method):
            offenders.append(f"{name}: not a method of the class")
            continue
        signature = inspect.signature(method)
        untyped = [
            p
            for p in list(signature.parameters)[1:]
            if signature.parameters[p].annotation is inspect.Parameter.empty
        ]
        if not method.__doc__ or untyped or signature.return_annotation is inspect.Signature.empty:
            offenders.append(f"{name}: docstring {bool(method.__doc__)}, untyped {untyped}")
    assert offenders == []


def test_the_miss_reasons_are_asked_in_the_documented_order_one_rule_each() -> None:
    """cache_server/runs/reasons.py: RULES holds one rule per declared reason (MissReason, in
    cache_protocol/runs.py), named for it, in the order its docstring lists them (the first that applies
    gives a miss's reason), and ``unknown``, which applies to every miss, last."""
    documented = re.findall(r"^- ``(\w+)``:", reasons.__doc__ or "", flags=re.MULTILINE)
    asked = [rule.__name__.removeprefix("_") for rule in reasons.RULES]
    assert asked == documented
    assert sorted(asked) == sorted(MISS_REASONS)
    assert asked[-1] == "unknown"
