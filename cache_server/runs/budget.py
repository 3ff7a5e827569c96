"""What runs may keep in the index, per token and per namespace, enforced when a report arrives (issue 36).

Before, the only bounds were the hourly gc's (``XLA_CACHE_MAX_RUNS`` runs, ``MAX_MISSES_PER_RUN`` misses
each): one namespace-scoped token grew the index by 443 MB in 30 s. Now, in the transaction that stores a
report (:func:`cache_server.runs.ingest.record_run`):

* a report of a **new** run whose token keeps ``XLA_CACHE_MAX_RUNS_PER_TOKEN`` runs already is refused
  with 507 ``quota_exceeded`` and stores nothing (an existing run's later reports are taken);
* a report's new misses are kept only while the token's runs keep fewer than
  ``XLA_CACHE_MAX_RUN_MISSES_PER_TOKEN`` misses and the namespace's fewer than
  ``XLA_CACHE_MAX_RUN_MISSES_PER_NAMESPACE``; the rest are counted in the run's numbers (its ``misses``),
  not stored, as those past the run's own bound are.

0 turns a limit off; with auth off there is no token, and only the namespace's limit applies. The usage is
counted in the report's transaction, so reports of one token at the same moment may pass a limit by what
they carry together (at most 1,000 misses each); the next report sees it. gc's pruning frees room.
"""

from __future__ import annotations

from dataclasses import dataclass

from cache_server.errors import QuotaExceeded
from cache_server.index.runs import HeldRun
from cache_server.settings import Settings

__all__ = ["RunBudget"]


@dataclass(frozen=True)
class RunBudget:
    """The limits (0: none) on what one token's runs and one namespace's may keep."""

    runs_per_token: int = 0
    misses_per_token: int = 0
    misses_per_namespace: int = 0

    @classmethod
    def of_settings(cls, settings: Settings) -> RunBudget:
        return cls(
            runs_per_token=settings.max_runs_per_token,
            misses_per_token=settings.max_run_misses_per_token,
            misses_per_namespace=settings.max_run_misses_per_namespace,
        )

    def admit_run(self, held: HeldRun, token_id: str | None) -> None:
        """:class:`QuotaExceeded` if the token keeps as many runs as it may already (before a new run)."""
        if token_id is None or not self.runs_per_token:
            return
        kept = held.runs_of_token(token_id)
        if kept >= self.runs_per_token:
            raise QuotaExceeded(
                f"The token keeps {kept} runs; XLA_CACHE_MAX_RUNS_PER_TOKEN is {self.runs_per_token}: a new "
                "run's report is refused and nothing of it was stored (background gc prunes old runs; an "
                "admin may raise the limit)."
            )

    def misses_room(self, held: HeldRun, namespace: str, token_id: str | None, wanted: int) -> int:
        """How many of ``wanted`` new misses may be kept (the token's and the namespace's room)."""
        room = wanted
        if wanted and token_id is not None and self.misses_per_token:
            room = min(room, max(0, self.misses_per_token - held.misses_of_token(token_id)))
        if room and self.misses_per_namespace:
            room = min(room, max(0, self.misses_per_namespace - held.misses_of_namespace(namespace)))
        return room
