"""The client's config file: where it is, and what it may hold.

``$XLA_CACHE_CONFIG`` names it (empty: no file); else ``$XDG_CONFIG_HOME/xla-cache/config.toml``, else
``~/.config/xla-cache/config.toml`` (on Windows ``%APPDATA%\\xla-cache\\config.toml``). A TOML file of
string values, each the same as its environment variable::

    server = "http://cache-vm:8080"     # XLA_CACHE_SERVER ("none": the local cache only)
    token = "xlc_..."                   # XLA_CACHE_TOKEN
    cache_dir = "/mnt/disks/xla-cache"  # XLA_CACHE_DIR
    signing_key = "~/.config/xla-cache/signing.key"  # XLA_CACHE_SIGNING_KEY
    trusted_keys = "~/.config/xla-cache/trusted.pub"  # XLA_CACHE_TRUSTED_KEYS

An unknown key, a value that is not a string or a file that is not TOML is a :class:`ClientError` naming
the file and the key: a typo never silently falls back to a default. A file that holds a token and that
others may read is warned about (as ssh does for its keys).
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from xla_cache.errors import ClientError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (tomli is a dependency there)
    import tomli as tomllib

__all__ = ["CONFIG_ENV", "KEYS", "ConfigFile", "config_path", "read_config_file"]

CONFIG_ENV = "XLA_CACHE_CONFIG"
# Each key of the file and the environment variable it stands in for.
KEYS = {
    "server": "XLA_CACHE_SERVER",
    "token": "XLA_CACHE_TOKEN",
    "cache_dir": "XLA_CACHE_DIR",
    "signing_key": "XLA_CACHE_SIGNING_KEY",
    "trusted_keys": "XLA_CACHE_TRUSTED_KEYS",
}
MAX_CONFIG_BYTES = 1 << 20
logger = logging.getLogger("xla_cache")


@dataclass(frozen=True)
class ConfigFile:
    """Where the config file is (None: ``XLA_CACHE_CONFIG`` is empty), whether it exists, and its values."""

    path: Path | None
    exists: bool
    values: Mapping[str, str]


def config_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The config file's path (it need not exist); None when ``XLA_CACHE_CONFIG`` is set empty."""
    env = os.environ if env is None else env
    if CONFIG_ENV in env:
        named = env[CONFIG_ENV].strip()
        return Path(named).expanduser() if named else None
    if os.name == "nt" and env.get("APPDATA"):  # pragma: no cover - Windows
        return Path(env["APPDATA"]) / "xla-cache" / "config.toml"
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "xla-cache" / "config.toml"


def read_config_file(env: Mapping[str, str] | None = None) -> ConfigFile:
    """The config file's values. A missing file at the default place is no error (no values); a missing
    file that ``XLA_CACHE_CONFIG`` names is one, as is any content but known keys with string values."""
    env = os.environ if env is None else env
    path = config_path(env)
    if path is None:
        return ConfigFile(path=None, exists=False, values={})
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
            mode = os.fstat(handle.fileno()).st_mode
    except FileNotFoundError:
        if env.get(CONFIG_ENV, "").strip():
            raise ClientError(f"{CONFIG_ENV}={env[CONFIG_ENV]!r}: there is no such file") from None
        return ConfigFile(path=path, exists=False, values={})
    except OSError as exc:
        raise ClientError(f"config file {path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ClientError(f"config file {path}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        parsed = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ClientError(f"config file {path}: not TOML ({exc})") from None
    values: dict[str, str] = {}
    for key, value in parsed.items():
        if key not in KEYS:
            known = ", ".join(KEYS)
            raise ClientError(f"config file {path}: unknown key {key!r} (it may hold {known})")
        if not isinstance(value, str):
            raise ClientError(f"config file {path}: {key} must be a string, not {type(value).__name__}")
        values[key] = value
    if values.get("token") and stat.S_IMODE(mode) & 0o077 and os.name != "nt":
        logger.warning(
            "xla-cache: config file %s holds a token and others may read it (mode %o): chmod 600 %s",
            path,
            stat.S_IMODE(mode),
            path,
        )
    return ConfigFile(path=path, exists=True, values=values)
