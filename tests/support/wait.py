"""The one poll-until loop of the suite: wait for something another thread or process does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from cache_server.parsing.service import QUIET_SECONDS

__all__ = ["QUIET_POLL", "wait_until"]

T = TypeVar("T")

QUIET_POLL = 2 * QUIET_SECONDS
"""The interval of a poll that waits for a live server's background parsing: the server parses once it has
served no request for ``QUIET_SECONDS`` (or, under constant requests, ten seconds after the entry arrived),
so a poll faster than this would itself keep the parsing waiting (cache_server.parsing.service)."""


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str | Callable[[], str] = "the condition never became true",
) -> T:
    """Call ``condition`` until it returns something truthy, and return that; fail the test after ``timeout``.

    ``message`` (or what it returns, read at the failure) says what did not happen, for the failure report.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"{text} (waited {timeout:g} s)")
        time.sleep(interval)
