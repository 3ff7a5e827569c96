"""``xla-cache run -- COMMAND``: start a job with auto-activation where the start-up hook does not run
(``python -S``, an embedded interpreter, a launcher that scrubs the environment);
:mod:`xla_cache.cli.hook` makes the command. ``xla-cache doctor --auto`` says whether the hook is on here.
"""

from __future__ import annotations

import argparse
import os
import sys

from xla_cache.cli.common import emit
from xla_cache.cli.hook import hook_status, run_command

__all__ = ["add_launch_commands", "auto_lines", "cmd_auto_status", "cmd_run"]

_SETTINGS = {"server": "XLA_CACHE_SERVER", "token": "XLA_CACHE_TOKEN", "cache_dir": "XLA_CACHE_DIR"}


def cmd_run(args: argparse.Namespace) -> int:
    """Execute the command with XLA_CACHE_AUTO=1 (and the settings given), in place of this process."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    settings = {name: str(getattr(args, key)) for key, name in _SETTINGS.items() if getattr(args, key)}
    try:
        argv, env = run_command(command, os.environ, settings)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        print(f"xla-cache run: cannot start {argv[0]}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached: exec replaced this process


def auto_lines() -> tuple[dict[str, object], list[str]]:
    """The auto-activation status of this interpreter: as JSON, and as doctor's lines."""
    status = hook_status()
    files = ", ".join(status.hook_files) or "none"
    lines = [
        f"auto-activation    {'on' if status.on else 'off'}: {status.reason}",
        f"hook files         {files}",
    ]
    return status.as_dict(), lines


def cmd_auto_status(args: argparse.Namespace) -> int:
    data, lines = auto_lines()
    emit(args, data, lines)
    return 0


def add_launch_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``run`` on ``xla-cache``'s subparsers."""
    run = sub.add_parser(
        "run",
        help="run a command with XLA_CACHE_AUTO=1 (python -S, embedded interpreters, scrubbed launchers)",
        description="Execute COMMAND with XLA_CACHE_AUTO=1 and the settings given in its environment. A "
        "Python interpreter is started with a bootstrap that starts the hook first, so that python -S "
        "warms too: xla-cache run -- python -S train.py --epochs 3",
    )
    run.add_argument("--server", help="the server's URL (XLA_CACHE_SERVER in the job)")
    run.add_argument("--token", help="the bearer token (XLA_CACHE_TOKEN in the job)")
    run.add_argument("--cache-dir", help="the base cache directory (XLA_CACHE_DIR in the job)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    run.set_defaults(func=cmd_run)
