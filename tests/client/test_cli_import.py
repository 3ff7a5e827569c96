"""``import xla_cache.cli`` stays cheap (issue 46, item 8): every ``xla-cache`` command pays it before it
does anything. Measured on a quiet machine it was 0.83 s, of which httpx's own command-line module (rich and
click) 0.30 s, ``xla_cache.config`` 0.15 s and ``cache_protocol.signing`` (cryptography) 0.08 s; the
subcommands now import what they need when they run. The test checks what is imported (time on a shared
machine is noise) and, loosely, the time."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("httpx", "httpx._main", "rich", "click", "cryptography", "importlib.metadata", "xla_cache.http.api")


def _imported(code: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out))


def test_importing_the_cli_imports_neither_http_nor_cryptography() -> None:
    found = _imported(
        "import json, sys, time\n"
        "t = time.perf_counter()\n"
        "import xla_cache.cli\n"
        "took = time.perf_counter() - t\n"
        f"print(json.dumps({{'heavy': sorted(m for m in {HEAVY!r} if m in sys.modules), 'took': took}}))\n"
    )
    assert found["heavy"] == []
    assert isinstance(found["took"], float) and found["took"] < 2.0  # 0.1-0.2 s quiet; 0.37 s at load 7


def test_the_client_api_still_resolves_and_httpx_skips_its_command_line() -> None:
    found = _imported(
        "import json, sys, xla_cache\n"
        "warm = xla_cache.warm\n"  # the package's names are imported on first use
        "from xla_cache import ClientConfig, WarmReport, flush, namespace_id\n"
        "skipped = 'httpx._main' not in sys.modules\n"
        "import httpx._main\n"  # and still importable by whoever wants it
        "main = 'httpx._main' in sys.modules\n"
        "print(json.dumps({'skipped': skipped, 'warm': warm.__module__, 'main': main}))\n"
    )
    assert found == {"skipped": True, "warm": "xla_cache.warming", "main": True}
