"""What the ``xla-cache`` subcommands share: the arguments every one takes, the server and token they
resolve, the namespace a command means when none is named, how a result is printed (lines, or one JSON
document), and how a removal is asked for in rounds (:func:`remove_in_rounds`).

The parser is :mod:`xla_cache.cli` (``main``); the commands live one module per concern beside this one:
:mod:`~xla_cache.cli.local` (warm, push, doctor), :mod:`~xla_cache.cli.admin` (stats, evict, tokens,
token-metrics, quota, purge-token, delete-namespace), :mod:`~xla_cache.cli.runs`,
:mod:`~xla_cache.cli.graphs`, :mod:`~xla_cache.cli.signing`, :mod:`~xla_cache.cli.config` and
:mod:`~xla_cache.cli.launch` (run).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cache_protocol import FINGERPRINT_FILE, name_problem
from cache_protocol.signing import Signer
from cache_protocol.text import shown
from xla_cache.config import DEFAULT_SERVER, ClientConfig, server_url_problem
from xla_cache.errors import ClientError
from xla_cache.frameworks import AUTO, all_frameworks, choose
from xla_cache.localcache.cachedir import read_last_warm
from xla_cache.transfer.progress import NullProgress, Progress, TqdmProgress

if TYPE_CHECKING:  # the HTTP client (httpx) is imported by the subcommands that talk to a server
    from xla_cache.http.admin_api import AdminApi
    from xla_cache.http.api import CacheApi

__all__ = [
    "REMOVAL_ROUND",
    "ChosenNamespace",
    "Removed",
    "add_common",
    "add_framework",
    "add_runtime",
    "config_of",
    "emit",
    "eviction_counts",
    "namespace_name",
    "namespace_of",
    "no_namespace_help",
    "progress_of",
    "remove_in_rounds",
    "runtime_fingerprint",
    "server_of",
]


def emit(args: argparse.Namespace, data: dict[str, Any], lines: list[str]) -> None:
    """Print ``data`` as JSON with ``--json`` (every non-ASCII character escaped), else ``lines``, each
    control, format or separator character in them written as ``\\u009b``: text a client sent (a run's
    host, a module name), whatever the server stored, never reaches the terminal as an escape sequence."""
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        print("\n".join(shown(line) for line in lines))


REMOVAL_ROUND = 10_000
"""Entries one call of a removal (purge-signer, purge-token, delete-namespace) asks the server to remove: the
CLI calls until none remain, printing the progress to stderr (a call is seconds, never the whole removal; one
cut short by a server that died loses nothing, and the command run again removes the rest)."""


@dataclass
class Removed:
    """What the rounds of one removal removed, and the server's answers to them."""

    entries: int = 0
    freed_bytes: int = 0
    remaining: int | None = None
    answers: list[dict[str, Any]] = field(default_factory=list)

    def as_eviction(self) -> dict[str, Any]:
        """The totals in the shape of one eviction's answer (what ``evict_lines`` prints)."""
        return {
            "evicted": self.entries,
            "freed_bytes": self.freed_bytes,
            "dry_run": False,
            "keys": None,
            "keys_truncated": False,
            "remaining": self.remaining,
        }


def eviction_counts(answer: dict[str, Any]) -> tuple[int, int, int | None]:
    """An eviction-shaped answer's entries removed, bytes freed and entries remaining (what
    :func:`remove_in_rounds` reads of a purge's rounds)."""
    return answer["evicted"], answer["freed_bytes"], answer.get("remaining")


def remove_in_rounds(
    call: Callable[[int], dict[str, Any]],
    counts: Callable[[dict[str, Any]], tuple[int, int, int | None]],
) -> Removed:
    """Call ``call(REMOVAL_ROUND)`` until nothing remains; ``counts`` reads an answer's entries removed, bytes
    freed and entries remaining (None from a server that removes everything at once: nothing is left).

    A round that removes fewer than it asked for went through everything there was when it started: what
    remains after it arrived meanwhile (uploads by a token kept, a key still trusted), and the rounds stop
    there rather than chase it (``remaining`` says how many; the command run again takes them). A round that
    fails after others succeeded says on stderr how far the removal got before the error goes up.
    """
    removed = Removed()
    while removed.remaining != 0:
        try:
            answer = call(REMOVAL_ROUND)
        except ClientError:
            if removed.answers:
                print(
                    f"stopped after removing {removed.entries:,} entries: run it again to remove the rest",
                    file=sys.stderr,
                    flush=True,
                )
            raise
        entries, freed, remaining = counts(answer)
        removed.answers.append(answer)
        removed.entries += entries
        removed.freed_bytes += freed
        removed.remaining = remaining or 0
        progress = f"removed {removed.entries:,} entries, {removed.remaining:,} remaining"
        print(progress, file=sys.stderr, flush=True)
        if entries < REMOVAL_ROUND:
            break  # all there was is gone; what remains arrived meanwhile
    return removed


def progress_of(args: argparse.Namespace) -> Progress:
    """Progress bars, unless ``--json`` or ``--no-progress``."""
    if args.json or args.no_progress:
        return NullProgress()
    return TqdmProgress()


def config_of(args: argparse.Namespace) -> ClientConfig:
    """Server, token and cache directory: the flags, else the environment, else the config file, else the
    defaults (:meth:`ClientConfig.resolve`); resolved once per command line (kept on ``args``), so that a
    message about it (a token withheld, a file others may read) is said once."""
    resolved = getattr(args, "_config", None)
    if isinstance(resolved, ClientConfig):
        return resolved
    flags = {"server": "--server", "token": "--token", "cache_dir": "--cache-dir"}
    config = ClientConfig.resolve(
        getattr(args, "server", None),
        getattr(args, "token", None),
        getattr(args, "cache_dir", None),
        flags=flags,
    )
    args._config = config
    return config


def server_of(config: ClientConfig) -> str:
    """The server's URL; a :class:`ClientError` when it is set to none or is no base URL."""
    if not config.server:
        source = config.sources.get("server")
        raise ClientError(
            f"this command needs a server, and the server is set to none ({source}): pass --server"
        )
    problem = server_url_problem(config.server)
    if problem:
        raise ClientError(f"server {problem} ({config.sources.get('server')})")
    return config.server


def cache_api(config: ClientConfig, *, signer: Signer | None = None) -> CacheApi:
    """A job's API at the configured server (:func:`server_of`), with the configured token and compression."""
    from xla_cache.http.api import CacheApi

    return CacheApi(server_of(config), config.token, compression=config.compression, signer=signer)


def admin_api(config: ClientConfig) -> AdminApi:
    """The admin API at the configured server, with the configured token and compression."""
    from xla_cache.http.admin_api import AdminApi

    return AdminApi(server_of(config), config.token, compression=config.compression)


def namespace_name(value: str) -> str:
    """An argparse ``type``: a valid namespace name (argparse names the argument, positional or not)."""
    problem = name_problem("namespace", value)
    if problem:
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid namespace name: {problem}")
    return value


@dataclass(frozen=True)
class ChosenNamespace:
    """The namespace a command works on, and how it was chosen (printed, so the user knows which)."""

    name: str
    how: str


def namespace_of(args: argparse.Namespace, config: ClientConfig) -> ChosenNamespace | None:
    """The namespace named on the command line; else with ``--runtime`` this runtime's (the framework is
    imported and fingerprinted: seconds); else the one the last warm into the cache directory recorded;
    else None (no warm has run here). Nothing is imported unless ``--runtime`` asks for it."""
    named = getattr(args, "namespace", None)
    if named:
        return ChosenNamespace(named, "as named")
    if getattr(args, "runtime", False):
        from xla_cache.frameworks.namespace import namespace_id

        fingerprint = runtime_fingerprint(args)
        return ChosenNamespace(namespace_id(fingerprint), f"this {fingerprint.get('framework')} runtime's")
    last = read_last_warm(config.cache_dir)
    if last is None:
        return None
    return ChosenNamespace(last.namespace, f"the last warm here: {last.framework}, {last.at}")


def no_namespace_help(config: ClientConfig) -> str:
    """What to do when no namespace was named and no warm has run into the cache directory."""
    local = []
    if config.cache_dir.is_dir():
        local = sorted(p.name for p in config.cache_dir.iterdir() if (p / FINGERPRINT_FILE).is_file())
    listed = f"; the namespaces under it: {', '.join(local[:10])}" if local else ""
    return (
        f"no warm has recorded this host's namespace in {config.cache_dir}{listed}. Name one, or pass "
        f"--runtime to fingerprint this runtime (it imports torch_xla or jax: seconds)"
    )


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
    parser.add_argument(
        "--server", help=f"server URL (default: $XLA_CACHE_SERVER, the config file's, or {DEFAULT_SERVER})"
    )
    parser.add_argument("--token", help="bearer token (default: $XLA_CACHE_TOKEN or the config file's)")
    parser.add_argument("--timeout", type=float, default=timeout, help=f"seconds (default {timeout:g})")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def add_runtime(parser: argparse.ArgumentParser) -> None:
    """``--runtime`` (with ``--framework`` and ``--spmd``): this runtime's namespace, fingerprinted live."""
    parser.add_argument(
        "--runtime",
        action="store_true",
        help="use this runtime's namespace, fingerprinted now (imports torch_xla or jax: seconds); "
        "default: the namespace the last warm here recorded",
    )
    add_framework(parser)
    parser.add_argument("--spmd", action="store_true", help="with --runtime: torch_xla with SPMD on")
    parser.add_argument(
        "--cache-dir",
        help="base cache directory, where the last warm is recorded (default: $XLA_CACHE_DIR, the config "
        "file's, or ~/.cache/xla-cache)",
    )


def add_framework(parser: argparse.ArgumentParser) -> None:
    """``--framework``: auto or one of the adapters."""
    names = sorted(all_frameworks())
    parser.add_argument(
        "--framework",
        choices=[AUTO, *names],
        default=AUTO,
        help="whose cache: the one installed with auto (torch_xla first); default auto",
    )
