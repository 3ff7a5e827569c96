"""``xla-cache config``: each client setting, its value and where it came from (flag, environment, config
file or default), the config file's place, and the namespace the last warm here recorded."""

from __future__ import annotations

import argparse
from typing import Any

from xla_cache.cli.common import config_of, emit
from xla_cache.config import tokens_for
from xla_cache.config_file import CONFIG_ENV, KEYS
from xla_cache.localcache.cachedir import read_last_warm

__all__ = ["add_config_command", "cmd_config", "shown_token"]


def shown_token(token: str | None) -> str | None:
    """A token as it may be printed: its first characters only (enough to tell two apart)."""
    if not token:
        return None
    return f"{token[:8]}… ({len(token)} characters)" if len(token) > 12 else "…"


def cmd_config(args: argparse.Namespace) -> int:
    """Print the resolved settings and their sources, and the server each token of the file belongs to."""
    config = config_of(args)
    values: dict[str, Any] = {
        "server": config.server if config.server is not None else "none (the local cache only)",
        "token": shown_token(config.token),
        "cache_dir": str(config.cache_dir),
        "signing_key": config.signing_key,
        "trusted_keys": config.trusted_keys,
    }
    path = config.config_file
    if path is None:
        where = f"none ({CONFIG_ENV} is empty)"
    else:
        where = f"{path}" + ("" if path.is_file() else " (not there)")
    last = read_last_warm(config.cache_dir)
    settings = {key: {"value": values[key], "source": config.sources[key]} for key in KEYS}
    settings["token"]["server"] = config.token_server
    data = {
        "config_file": None if path is None else str(path),
        "config_file_exists": path is not None and path.is_file(),
        "settings": settings,
        "file_tokens": [{"server": t.server, "token": shown_token(t.token)} for t in config.file_tokens],
        "last_warm": None if last is None else vars(last),
    }
    lines = [f"config file   {where}"]
    for key in KEYS:
        value = values[key] if values[key] is not None else "-"
        source = config.sources[key]
        if key == "token" and config.token_server is not None:
            source += f", for {config.token_server}"
        elif key == "token" and config.token is None and config.server and config.file_tokens:
            source += f"; the file holds {tokens_for(config.file_tokens)} only"
        lines.append(f"{key:<13} {value}  ({source})")
    for number, held in enumerate(config.file_tokens):
        label = "file tokens" if number == 0 else ""
        lines.append(f"{label:<13} {shown_token(held.token)} for {held.server}")
    if last is None:
        lines.append(f"last warm     none recorded in {config.cache_dir}")
    else:
        lines.append(
            f"last warm     {last.namespace} ({last.framework}, {last.at}, from {last.server or 'none'})"
        )
    emit(args, data, lines)
    return 0


def add_config_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``config`` on ``xla-cache``'s subparsers."""
    config = sub.add_parser(
        "config",
        help="show each setting (server, token, cache directory, keys) and where it came from",
        description="Each value comes from its flag, else its environment variable (XLA_CACHE_SERVER, "
        "XLA_CACHE_TOKEN, XLA_CACHE_DIR, XLA_CACHE_SIGNING_KEY, XLA_CACHE_TRUSTED_KEYS), else the config "
        f"file (${CONFIG_ENV}, else ~/.config/xla-cache/config.toml: TOML, keys {', '.join(KEYS)}), else "
        "its default. A token of the file goes to its own server only (the file's server, or a "
        '[servers."URL"] table\'s): the file tokens line says which. Tokens are shown by their first '
        "characters only.",
    )
    config.add_argument("--server", help="as other commands take it (shows that it wins)")
    config.add_argument("--token", help="as other commands take it (shows that it wins)")
    config.add_argument("--cache-dir", help="as other commands take it (shows that it wins)")
    config.add_argument("--json", action="store_true", help="print one JSON document")
    config.set_defaults(func=cmd_config)
