"""The client's config file: where it is, and what it may hold.

``$XLA_CACHE_CONFIG`` names it (empty: no file); else ``$XDG_CONFIG_HOME/xla-cache/config.toml``, else
``~/.config/xla-cache/config.toml`` (on Windows ``%APPDATA%\\xla-cache\\config.toml``). A TOML file of
string values, each the same as its environment variable, and a table of tokens per server::

    server = "http://cache-vm:8080"     # XLA_CACHE_SERVER ("none": the local cache only)
    token = "xlc_..."                   # XLA_CACHE_TOKEN: the token of the server above
    cache_dir = "/mnt/disks/xla-cache"  # XLA_CACHE_DIR
    signing_key = "~/.config/xla-cache/signing.key"  # XLA_CACHE_SIGNING_KEY
    trusted_keys = "~/.config/xla-cache/trusted.pub"  # XLA_CACHE_TRUSTED_KEYS

    [servers."http://test-vm:8080"]     # the token of another server (as kubectl ties one to a context)
    token = "xlc_..."

A token of the file belongs to one server: the top-level ``token`` to the file's ``server`` (the default
server when the file names none), each ``[servers."URL"]`` table's to its URL. It is sent to that server
only (:meth:`xla_cache.config.ClientConfig.resolve`): a server named by ``--server`` or
``XLA_CACHE_SERVER`` gets no token from the file unless the file holds one for it.

An unknown key, a value that is not a string, an empty value, two tokens for one server, a file that is
not TOML or not a regular file (a FIFO, a device, a directory) is a :class:`ClientError` naming the file
and the key: a typo never silently falls back to a default, and nothing waits on a pipe. A file that holds
a token and that others may read is warned about (as ssh does for its keys).
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from xla_cache.errors import ClientError
from xla_cache.server_url import (
    DEFAULT_SERVER,
    is_local_only,
    normalize_server,
    server_identity,
    server_url_problem,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (tomli is a dependency there)
    import tomli as tomllib

__all__ = ["CONFIG_ENV", "KEYS", "SERVERS_KEY", "ConfigFile", "FileToken", "config_path", "read_config_file"]

CONFIG_ENV = "XLA_CACHE_CONFIG"
# Each key of the file and the environment variable it stands in for.
KEYS = {
    "server": "XLA_CACHE_SERVER",
    "token": "XLA_CACHE_TOKEN",
    "cache_dir": "XLA_CACHE_DIR",
    "signing_key": "XLA_CACHE_SIGNING_KEY",
    "trusted_keys": "XLA_CACHE_TRUSTED_KEYS",
}
SERVERS_KEY = "servers"  # [servers."URL"] tables: a token per server
SERVER_TABLE_KEYS = ("token",)
MAX_CONFIG_BYTES = 1 << 20
logger = logging.getLogger("xla_cache")


@dataclass(frozen=True)
class FileToken:
    """A token the file holds, the server it belongs to (normalised) and the key that holds it."""

    server: str
    token: str
    key: str = field(default="token", compare=False)


@dataclass(frozen=True)
class ConfigFile:
    """Where the config file is (None: ``XLA_CACHE_CONFIG`` is empty), whether it exists, its values, and
    its tokens, each tied to its server."""

    path: Path | None
    exists: bool
    values: Mapping[str, str]
    tokens: tuple[FileToken, ...] = ()

    def token_for(self, server: str) -> FileToken | None:
        """The file's token for ``server`` (any spelling of it: :func:`server_identity`), or None."""
        identity = server_identity(server)
        return next((t for t in self.tokens if server_identity(t.server) == identity), None)


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
    """The config file's values and tokens. A missing file at the default place is no error (no values); a
    missing file that ``XLA_CACHE_CONFIG`` names is one, as is any content but known keys with string
    values and ``[servers."URL"]`` tables of a token."""
    env = os.environ if env is None else env
    path = config_path(env)
    if path is None:
        return ConfigFile(path=None, exists=False, values={})
    read = _read(path, named=bool(env.get(CONFIG_ENV, "").strip()))
    if read is None:
        return ConfigFile(path=path, exists=False, values={})
    data, mode = read
    try:
        parsed = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ClientError(f"config file {path}: not TOML ({exc})") from None
    values = _values(path, parsed)
    tokens = _tokens(path, values, parsed.get(SERVERS_KEY))
    if tokens and stat.S_IMODE(mode) & 0o077 and os.name != "nt":
        logger.warning(
            "xla-cache: config file %s holds a token and others may read it (mode %o): chmod 600 %s",
            path,
            stat.S_IMODE(mode),
            path,
        )
    return ConfigFile(path=path, exists=True, values=values, tokens=tokens)


def _read(path: Path, *, named: bool) -> tuple[bytes, int] | None:
    """The file's bytes and mode; None when it is missing and ``named`` is false. Opened without blocking
    (a FIFO would wait for a writer) and refused unless a regular file."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if named:
            raise ClientError(f"{CONFIG_ENV}={str(path)!r}: there is no such file") from None
        return None
    except OSError as exc:
        raise ClientError(f"config file {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ClientError(
                f"config file {path}: not a regular file ({_file_kind(mode)}); name a file, or set "
                f"{CONFIG_ENV} empty for none"
            )
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ClientError(f"config file {path}: cannot read it ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ClientError(f"config file {path}: larger than {MAX_CONFIG_BYTES} bytes")
    return data, mode


def _file_kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def _values(path: Path, parsed: Mapping[str, object]) -> dict[str, str]:
    """The file's top-level string values: each a known key, a string, not empty."""
    values: dict[str, str] = {}
    for key, value in parsed.items():
        if key == SERVERS_KEY:
            continue
        if key not in KEYS:
            known = ", ".join([*KEYS, SERVERS_KEY])
            raise ClientError(f"config file {path}: unknown key {key!r} (it may hold {known})")
        values[key] = _string(path, key, value)
    return values


def _string(path: Path, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ClientError(f"config file {path}: {key} must be a string, not {type(value).__name__}")
    if not value.strip():
        meant = ', or "none" for the local cache only' if key == "server" else ""
        raise ClientError(f"config file {path}: {key} is empty (leave it out for its default{meant})")
    return value


def _tokens(path: Path, values: Mapping[str, str], servers: object) -> tuple[FileToken, ...]:
    """The file's tokens, each tied to its server: the top-level token to the file's server (the default
    server when it names none), each ``[servers."URL"]`` table's to its URL. Two for one server are an
    error: which one to send would be a guess."""
    tokens = [*_top_level_token(path, values), *_table_tokens(path, servers)]
    seen: dict[str, FileToken] = {}
    for token in tokens:
        first = seen.setdefault(server_identity(token.server), token)
        if first is not token:
            raise ClientError(
                f"config file {path}: two tokens for {first.server} ({first.key} and {token.key}): keep one"
            )
    return tuple(tokens)


def _top_level_token(path: Path, values: Mapping[str, str]) -> list[FileToken]:
    if "token" not in values:
        return []
    server = values.get("server", DEFAULT_SERVER)
    if is_local_only(server):
        raise ClientError(
            f'config file {path}: the token beside server = "{server}" belongs to no server: name its '
            f'server, or put it in a [{SERVERS_KEY}."URL"] table'
        )
    return [FileToken(normalize_server(server), values["token"], "the top-level token")]


def _table_tokens(path: Path, servers: object) -> list[FileToken]:
    if servers is None:
        return []
    if not isinstance(servers, dict):
        raise ClientError(
            f'config file {path}: {SERVERS_KEY} must be a table of servers ([{SERVERS_KEY}."URL"] with '
            f"token = ...), not {type(servers).__name__}"
        )
    return [_table_token(path, name, table) for name, table in servers.items()]


def _table_token(path: Path, name: str, table: object) -> FileToken:
    where = f'[{SERVERS_KEY}."{name}"]'
    if not name.strip() or is_local_only(name):
        raise ClientError(f"config file {path}: {where} names no server")
    problem = server_url_problem(name)
    if problem:
        raise ClientError(f"config file {path}: {where}: {problem}")
    if not isinstance(table, dict):
        raise ClientError(f"config file {path}: {where} must be a table (token = ...)")
    for key in table:
        if key not in SERVER_TABLE_KEYS:
            known = ", ".join(SERVER_TABLE_KEYS)
            raise ClientError(f"config file {path}: {where}: unknown key {key!r} (it may hold {known})")
    if "token" not in table:
        raise ClientError(f"config file {path}: {where} holds no token")
    return FileToken(normalize_server(name), _string(path, f"{where} token", table["token"]), where)
