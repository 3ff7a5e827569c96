"""How ``xla-cache`` asks for a removal in rounds (purge-signer, purge-token, delete-namespace): until nothing
remains, but never chasing what arrives while it runs, and saying how far it got when a round fails."""

from __future__ import annotations

from typing import Any

import pytest

from xla_cache.cli.common import REMOVAL_ROUND, remove_in_rounds
from xla_cache.errors import ServerUnavailable


class Held:
    """A server's view of the entries left to remove; ``arriving`` more are stored during each call."""

    def __init__(self, entries: int, arriving: int = 0, fail_at: int | None = None) -> None:
        self.entries, self.arriving, self.fail_at, self.calls = entries, arriving, fail_at, 0

    def call(self, most: int) -> dict[str, Any]:
        self.calls += 1
        if self.calls == self.fail_at:
            raise ServerUnavailable("the purge did not answer within 600 s")
        removed = min(most, self.entries)
        self.entries += self.arriving - removed
        return {"evicted": removed, "freed_bytes": 10 * removed, "remaining": self.entries}


def counts(answer: dict[str, Any]) -> tuple[int, int, int | None]:
    return answer["evicted"], answer["freed_bytes"], answer["remaining"]


def test_rounds_go_until_none_remain(capsys: pytest.CaptureFixture[str]) -> None:
    held = Held(2 * REMOVAL_ROUND + 5)
    removed = remove_in_rounds(held.call, counts)
    assert (removed.entries, removed.freed_bytes, removed.remaining, held.calls) == (
        2 * REMOVAL_ROUND + 5,
        10 * (2 * REMOVAL_ROUND + 5),
        0,
        3,
    )
    assert (
        capsys.readouterr().err.splitlines()[-1] == f"removed {2 * REMOVAL_ROUND + 5:,} entries, 0 remaining"
    )


def test_what_arrives_meanwhile_is_left_and_counted_not_chased() -> None:
    # a token kept (--keep-token) whose jobs store one entry during every call: the rounds stop after the
    # first that removed less than it asked for, and say what remains
    held = Held(REMOVAL_ROUND + 3, arriving=1)
    removed = remove_in_rounds(held.call, counts)
    assert (held.calls, removed.entries, removed.remaining) == (2, REMOVAL_ROUND + 4, 1)
    assert removed.as_eviction()["remaining"] == 1


def test_an_older_server_that_removes_everything_at_once_is_one_round() -> None:
    answers = iter([{"evicted": 12, "freed_bytes": 120, "remaining": None}])
    removed = remove_in_rounds(lambda most: next(answers), counts)
    assert (removed.entries, removed.remaining) == (12, 0)


def test_a_failed_round_says_how_far_the_removal_got(capsys: pytest.CaptureFixture[str]) -> None:
    held = Held(3 * REMOVAL_ROUND, fail_at=2)
    with pytest.raises(ServerUnavailable):
        remove_in_rounds(held.call, counts)
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"stopped after removing {REMOVAL_ROUND:,} entries: run it again to remove the rest"
    )
    first = Held(5, fail_at=1)
    with pytest.raises(ServerUnavailable):
        remove_in_rounds(first.call, counts)
    assert "stopped after" not in capsys.readouterr().err  # nothing was removed: the error says it all
