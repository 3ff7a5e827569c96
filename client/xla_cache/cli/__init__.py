"""``xla-cache``, the command line: one module per group of subcommands, one ``cmd_<name>(args) -> int``
per subcommand, ``--json`` for scripts.

- :mod:`.local`: warm, push, doctor (this host's cache directory)
- :mod:`.admin`: stats, evict, tokens, token-metrics, quota, purge-token, delete-namespace; what they
  print is made in :mod:`.admin_text`
- :mod:`.runs`: runs (the runs jobs reported, one run and why it compiled)
- :mod:`.graphs`: graphs (a namespace's bucketing report)
- :mod:`.signing`: keys, signers, purge-signer, unsigned
- :mod:`.config`: config (each setting and where it came from)
- :mod:`.launch`: run (a command with auto-activation, where the start-up hook does not run)
- :mod:`.prefill`: prefill (compile many shapes here, ahead of the target job)
- :mod:`.common`: what every subcommand shares (arguments, server and token, the namespace meant, printing)

This module is the entry point (:func:`main`, :func:`build_parser`). Adding a subcommand: write its
``cmd_<name>`` in the module of its group and register its parser in that module's ``add_*`` function.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import stat
import sys

from xla_cache.cli.admin import add_admin_commands
from xla_cache.cli.common import config_of
from xla_cache.cli.config import add_config_command
from xla_cache.cli.graphs import add_graphs_command
from xla_cache.cli.launch import add_launch_commands
from xla_cache.cli.local import add_local_commands
from xla_cache.cli.prefill import add_prefill_command
from xla_cache.cli.runs import add_runs_command
from xla_cache.cli.signing import add_signing_commands
from xla_cache.config import tokens_for
from xla_cache.errors import ClientError, ServerError, ServerUnavailable
from xla_cache.server_url import normalize_server

__all__ = ["READER_GONE", "build_parser", "main"]

READER_GONE = 141  # the exit status when stdout's reader went away: 128 + SIGPIPE, as a shell shows it


def build_parser() -> argparse.ArgumentParser:
    """The ``xla-cache`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="xla-cache",
        description="A shared compilation cache for PyTorch/XLA, JAX and torchax jobs: warm a job's cache "
        "from the server, upload what it compiles, and see why jobs compiled (runs, graphs, stats).",
        epilog="Server, token and cache directory: the flag, else XLA_CACHE_SERVER, XLA_CACHE_TOKEN and "
        "XLA_CACHE_DIR, else the config file (xla-cache config shows where each value came from).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log requests")
    sub = parser.add_subparsers(dest="command", required=True)

    add_local_commands(sub)
    add_admin_commands(sub)
    add_runs_command(sub)
    add_graphs_command(sub)
    add_signing_commands(sub)
    add_config_command(sub)
    add_launch_commands(sub)
    add_prefill_command(sub)

    return parser


def _hint(args: argparse.Namespace, exc: ClientError) -> str | None:
    """Where the setting at fault came from and how to set another: the server's URL for a server that
    could not be reached, the token for one the server refused."""
    if isinstance(exc, ServerUnavailable) and not getattr(args, "server", None):
        return config_of(args).server_hint()
    if isinstance(exc, ServerError) and exc.status == 401:
        config = config_of(args)
        source = config.sources.get("token", "default")
        if source == "default" and config.file_tokens and config.server:
            held = tokens_for(config.file_tokens)
            table = f'[servers."{normalize_server(config.server)}"]'
            return (
                f"no token was sent: {config.config_file} holds {held} only; pass --token, set "
                f"XLA_CACHE_TOKEN, or add {table} with its token to the file"
            )
        where = "no token was given" if source == "default" else f"the token came from {source}"
        return f"{where}; pass --token, or set XLA_CACHE_TOKEN or token in {config.config_file}"
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``xla-cache`` console script. A reader of the output that stops early
    (``xla-cache stats | head``) ends the command quietly, whichever command it is."""
    try:
        return _run(argv)
    except BrokenPipeError:
        if not _stdout_is_a_pipe():
            raise  # not the reader of our output: a real failure, shown as one
        return _reader_gone()


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        code: int = args.func(args)
    except ClientError as exc:  # includes ServerProblem: the server could not be used
        print(f"xla-cache {args.command}: {exc}", file=sys.stderr)
        with contextlib.suppress(ClientError):
            hint = _hint(args, exc)
            if hint:
                print(f"  ({hint})", file=sys.stderr)
        return 2
    sys.stdout.flush()  # a closed pipe is found here, inside main, not in Python's flush at exit
    return code


def _stdout_is_a_pipe() -> bool:
    try:
        mode = os.fstat(sys.stdout.fileno()).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _reader_gone() -> int:
    """stdout's reader went away: stop without a traceback, as a command that SIGPIPE ended would (Python's
    docs, "Note on SIGPIPE"). stdout is pointed at /dev/null so that the flush at exit has nowhere to fail;
    the exit status is 141 (128 + SIGPIPE), what a shell reports for ``yes | head``'s ``yes``."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return READER_GONE


if __name__ == "__main__":
    sys.exit(main())
