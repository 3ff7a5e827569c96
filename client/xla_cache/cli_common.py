"""What the ``xla-cache`` subcommands share: the arguments every one takes, the server and token they
resolve, this runtime's fingerprint, and how a result is printed (lines, or one JSON document).

The commands are in :mod:`xla_cache.cli` (warm, push, doctor) and :mod:`xla_cache.admin_commands` (stats,
evict, tokens, quota, purge-token).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from xla_cache.config import ClientConfig
from xla_cache.errors import ClientError
from xla_cache.frameworks import AUTO, all_frameworks, choose
from xla_cache.progress import NullProgress, Progress, TqdmProgress

__all__ = [
    "add_common",
    "add_framework",
    "config_of",
    "emit",
    "progress_of",
    "runtime_fingerprint",
    "server_of",
]


def emit(args: argparse.Namespace, data: dict[str, Any], lines: list[str]) -> None:
    """Print ``data`` as JSON with ``--json``, else ``lines``."""
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        print("\n".join(lines))


def progress_of(args: argparse.Namespace) -> Progress:
    """Progress bars, unless ``--json`` or ``--no-progress``."""
    if args.json or args.no_progress:
        return NullProgress()
    return TqdmProgress()


def config_of(args: argparse.Namespace) -> ClientConfig:
    """Server, token and cache directory from the arguments and the environment."""
    return ClientConfig.resolve(args.server, args.token, getattr(args, "cache_dir", None))


def server_of(config: ClientConfig) -> str:
    """The server's URL; a :class:`ClientError` when none was given."""
    if not config.server:
        raise ClientError("no server: pass --server or set XLA_CACHE_SERVER")
    return config.server


def runtime_fingerprint(args: argparse.Namespace) -> dict[str, Any]:
    """This machine's fingerprint for ``--framework`` (``--spmd`` turns torch_xla's SPMD on first, as the
    training job would)."""
    framework = choose(args.framework)
    framework.require()
    if getattr(args, "spmd", False):
        if framework.name != "torch_xla":
            raise ClientError("--spmd is torch_xla's (torch_xla.runtime.use_spmd)")
        import torch_xla.runtime as xr

        xr.use_spmd()
    return framework.fingerprint()


def add_common(parser: argparse.ArgumentParser, *, timeout: float) -> None:
    """``--server``, ``--token``, ``--timeout`` (default ``timeout``) and ``--json``."""
    parser.add_argument("--server", help="server URL (default: $XLA_CACHE_SERVER)")
    parser.add_argument("--token", help="bearer token (default: $XLA_CACHE_TOKEN)")
    parser.add_argument("--timeout", type=float, default=timeout, help=f"seconds (default {timeout:g})")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def add_framework(parser: argparse.ArgumentParser) -> None:
    """``--framework``: auto or one of the adapters."""
    names = sorted(all_frameworks())
    parser.add_argument(
        "--framework",
        choices=[AUTO, *names],
        default=AUTO,
        help="whose cache: the one installed with auto (torch_xla first); default auto",
    )
