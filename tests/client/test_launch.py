"""``xla-cache run``'s command and ``doctor --auto``'s answer, in process: what is executed, with which
environment, and why auto-activation is off."""

from __future__ import annotations

import pytest

from xla_cache.cli.hook import hook_status, run_command


def _shape(argv: list[str]) -> list[str]:
    """argv with the bootstrap's code written as BOOT."""
    return ["BOOT" if "xla_cache_hook.startup()" in a else a for a in argv]


def test_a_command_that_is_not_python_runs_as_it_is_with_the_variable_and_the_settings() -> None:
    argv, env = run_command(
        ["torchrun", "train.py"], {"PATH": "/bin"}, {"XLA_CACHE_SERVER": "http://vm:8080"}
    )
    assert argv == ["torchrun", "train.py"]
    assert env == {"PATH": "/bin", "XLA_CACHE_SERVER": "http://vm:8080", "XLA_CACHE_AUTO": "1"}


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            ["python", "-S", "train.py", "--lr", "1"],
            ["python", "-S", "-c", "BOOT", "script", "train.py", "--lr", "1"],
        ),
        (
            ["python3.11", "-Su", "-W", "error", "t.py"],
            ["python3.11", "-Su", "-W", "error", "-c", "BOOT", "script", "t.py"],
        ),
        (
            ["/usr/bin/python3", "-I", "-m", "pkg.train", "x"],
            ["/usr/bin/python3", "-I", "-c", "BOOT", "module", "pkg.train", "x"],
        ),
        (["python", "-c", "print(1)", "a"], ["python", "-c", "BOOT", "code", "print(1)", "a"]),
        (["python", "--", "t.py"], ["python", "-c", "BOOT", "script", "t.py"]),
        (["python"], ["python"]),  # interactive: nothing to run after the hook
        (["python", "-"], ["python", "-"]),
    ],
)
def test_a_python_command_starts_the_hook_before_its_target(command: list[str], expected: list[str]) -> None:
    argv, env = run_command(command, {}, {})
    assert _shape(argv) == expected and env == {"XLA_CACHE_AUTO": "1"}


def test_no_command_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no command given"):
        run_command([], {}, {})


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "XLA_CACHE_AUTO is not set to 1"),
        ("yes please", "XLA_CACHE_AUTO='yes please' is neither 1 nor 0"),
    ],
)
def test_doctor_says_why_auto_activation_is_off(value: str | None, reason: str) -> None:
    status = hook_status({} if value is None else {"XLA_CACHE_AUTO": value})
    assert not status.on and status.reason == reason
