"""A newcomer's job, as the README's quickstart writes it: ``import xla_cache; xla_cache.warm()`` with no
server argument and no ``XLA_CACHE_*`` variable, in a folder that holds its own ``client.py`` and
``client/`` package, on a host whose config file (``~/.config/xla-cache/config.toml``) names the server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CLIENT_BIN = Path(sys.executable).with_name("xla-cache")

OWN_CLIENT = 'ROLE = "the job\'s own"\n'


def job_folder(root: Path, script: str) -> Path:
    """A job's folder: ``job.py`` (``script``), and a ``client.py`` and a ``client/`` package of its own that
    the job imports beside ``xla_cache``. Returns the script's path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "client.py").write_text(OWN_CLIENT)
    (root / "client").mkdir(exist_ok=True)
    (root / "client" / "__init__.py").write_text(OWN_CLIENT)
    (root / "job.py").write_text(script)
    return root / "job.py"


def newcomer_env(base: Mapping[str, str], home: Path, server: str) -> dict[str, str]:
    """``base`` with a fresh ``HOME`` whose config file names ``server``: no ``XLA_CACHE_*`` variable, no
    ``XDG_*`` folder, so the client finds its config file and cache directory where a user's would be."""
    env = {k: v for k, v in base.items() if not k.startswith(("XLA_CACHE_", "XDG_"))}
    env["HOME"] = str(home)
    config = home / ".config" / "xla-cache" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'server = "{server}"\n')
    return env


def cli_json(env: Mapping[str, str], *args: str) -> dict[str, Any]:
    """``xla-cache ARGS --json`` in ``env``: its JSON document (the command must succeed)."""
    done = subprocess.run(
        [str(CLIENT_BIN), *args, "--json"], env=dict(env), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    value = json.loads(done.stdout)
    assert isinstance(value, dict)
    return value
