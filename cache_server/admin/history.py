"""How long the story of past runs is kept: runs (``XLA_CACHE_RUN_RETENTION_DAYS``, ``XLA_CACHE_MAX_RUNS``)
and tombstones (``XLA_CACHE_TOMBSTONE_DAYS``, ``XLA_CACHE_MAX_TOMBSTONES``), pruned by background gc's
rounds (:meth:`cache_server.admin.service.AdminService.gc`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cache_server.index.database import Database
from cache_server.index.runs import RunRepository
from cache_server.index.tombstones import prune_tombstones
from cache_server.settings import Settings

__all__ = ["Pruned", "prune_history"]


@dataclass(frozen=True)
class Pruned:
    """How many runs (with their misses) and tombstones one round removed."""

    runs: int
    tombstones: int


def prune_history(database: Database, settings: Settings, now: dt.datetime) -> Pruned:
    """Remove the runs and tombstones past their age or count bound."""
    runs = RunRepository(database).prune(
        older_than=now - dt.timedelta(days=settings.run_retention_days), keep=settings.max_runs
    )
    tombstones = prune_tombstones(
        database, older_than=now - dt.timedelta(days=settings.tombstone_days), keep=settings.max_tombstones
    )
    return Pruned(runs=runs, tombstones=tombstones)
