"""Run reports (issue 27): storing what each job reports (:mod:`.ingest`), why each compile happened
(:mod:`.reasons`), and how long runs and tombstones are kept (:mod:`.retention`)."""

from __future__ import annotations

from cache_server.index.runs import RunTotals
from cache_server.runs.ingest import RunDetail, RunReport, RunService
from cache_server.runs.reasons import ExplainedMiss

__all__ = ["ExplainedMiss", "RunDetail", "RunReport", "RunService", "RunTotals"]
