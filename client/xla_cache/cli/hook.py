"""Auto-activation where the start-up hook does not run, and whether it runs here.

:func:`hook_status` answers ``xla-cache doctor``: is ``XLA_CACHE_AUTO`` on, is the hook installed in one of
this interpreter's site directories, does this interpreter read them (not with ``python -S``), and did
the hook start in this very process; if auto-activation is off, why.

:func:`run_command` is ``xla-cache run -- COMMAND``: the command with ``XLA_CACHE_AUTO=1`` (and the server,
token and cache directory given as flags) in its environment, for every Python it starts. A command that
is itself a Python interpreter is started with a bootstrap (``-c``) that starts the hook before the
script, ``-m`` module or ``-c`` code runs, so that ``python -S``, whose start reads no ``.pth`` file,
warms as any other job; the directories of the hook and of this package are appended to its
``sys.path`` (after the job's own) so that they import there.
"""

from __future__ import annotations

import os
import re
import site
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import xla_cache_hook

__all__ = ["HOOK_FILE", "HookStatus", "hook_status", "run_command"]

HOOK_FILE = "xla_cache_auto.pth"
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
# Interpreter options that take a value as the next argument (``-W error``, ``-X importtime``).
_VALUE_OPTIONS = frozenset("WX")


@dataclass(frozen=True)
class HookStatus:
    """Whether auto-activation is on for this interpreter, and why not when it is not."""

    variable: str | None  # XLA_CACHE_AUTO as set
    hook_files: list[str]  # the hook's .pth files in this interpreter's site directories
    reads_site: bool  # False under python -S
    started_here: bool  # the hook installed its finder in this process
    on: bool
    reason: str  # why it is on, or why not

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _site_directories() -> list[str]:
    directories = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    return [*directories, *([user] if user else [])]


def hook_status(env: Mapping[str, str] | None = None) -> HookStatus:
    """Auto-activation in this interpreter, as the environment ``env`` (default: this one) would have it."""
    env = os.environ if env is None else env
    variable = env.get(xla_cache_hook.AUTO_ENV)
    setting = xla_cache_hook.auto_setting(variable)
    files = [str(Path(d) / HOOK_FILE) for d in _site_directories() if (Path(d) / HOOK_FILE).is_file()]
    reads_site = not sys.flags.no_site
    started = xla_cache_hook.installed() is not None
    reasons = [
        (setting is None, f"{xla_cache_hook.AUTO_ENV}={variable!r} is neither 1 nor 0"),
        (not setting, f"{xla_cache_hook.AUTO_ENV} is not set to 1"),
        (not reads_site, "this interpreter reads no site directory (python -S): use `xla-cache run -- ...`"),
        (
            not files,
            f"the hook ({HOOK_FILE}) is in none of this interpreter's site directories: reinstall "
            "the package, or start jobs with `xla-cache run -- ...`",
        ),
    ]
    reason = next((text for failed, text in reasons if failed), None)
    if reason is None:
        reason = f"{xla_cache_hook.AUTO_ENV}=1 and the hook is installed ({files[0]}): every Python job warms"
    return HookStatus(variable, files, reads_site, started, reason.endswith("warms"), reason)


def run_command(
    command: Sequence[str], env: Mapping[str, str], settings: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """What ``xla-cache run`` executes: the command (a Python interpreter's with the bootstrap) and its
    environment (``env`` with ``XLA_CACHE_AUTO=1`` and ``settings``, variables by name)."""
    if not command:
        raise ValueError("xla-cache run: no command given (xla-cache run -- python train.py ...)")
    environment = {**env, **settings, xla_cache_hook.AUTO_ENV: "1"}
    if not _PYTHON.fullmatch(Path(command[0]).name):
        return list(command), environment
    return _with_bootstrap(list(command)), environment


def _with_bootstrap(command: list[str]) -> list[str]:
    """``python [options] TARGET ...`` as ``python [options] -c BOOTSTRAP KIND TARGET ...``, where KIND is
    ``script``, ``module`` or ``code``; an interactive interpreter (no target) is left as it is."""
    position = 1
    while position < len(command):
        argument = command[position]
        if argument in ("-m", "-c"):
            kind = "module" if argument == "-m" else "code"
            if position + 1 >= len(command):
                return command
            return [*command[:position], "-c", _bootstrap(), kind, *command[position + 1 :]]
        if argument == "-" or not argument.startswith("-"):
            if argument == "-":
                return command
            return [*command[:position], "-c", _bootstrap(), "script", *command[position:]]
        if argument == "--":  # the script follows
            rest = command[position + 1 :]
            return [*command[:position], "-c", _bootstrap(), "script", *rest] if rest else command
        letters = argument[1:]
        if letters and letters[-1] in _VALUE_OPTIONS and not argument.startswith("--"):
            position += 1  # -W error, -X importtime: the value is the next argument
        position += 1
    return command


def _bootstrap() -> str:
    """The ``-c`` code: the hook's and the client's directories after the job's own, the hook started,
    then the target run as ``python`` would run it."""
    import xla_cache

    hook, client = Path(xla_cache_hook.__file__).parent, Path(xla_cache.__file__).parents[1]
    directories = list(dict.fromkeys([str(hook), str(client)]))
    return "\n".join(
        [
            "import os, runpy, sys",
            f"sys.path.extend(d for d in {directories!r} if d not in sys.path)",
            "import xla_cache_hook",
            "xla_cache_hook.startup()",
            "kind, target = sys.argv[1], sys.argv[2]",
            "if kind == 'code':",
            "    sys.argv = ['-c', *sys.argv[3:]]",
            "    exec(compile(target, '<string>', 'exec'), {'__name__': '__main__'})",
            "elif kind == 'module':",
            "    sys.argv = [target, *sys.argv[3:]]",
            "    runpy.run_module(target, run_name='__main__', alter_sys=True)",
            "else:",
            "    sys.argv = sys.argv[2:]",
            "    if not (sys.flags.isolated or getattr(sys.flags, 'safe_path', False)):",
            "        sys.path[0] = os.path.dirname(os.path.abspath(target))",
            "    runpy.run_path(target, run_name='__main__')",
        ]
    )
