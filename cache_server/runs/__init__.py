"""Run reports (issue 27): the run vocabulary (:mod:`.model`), storing what each job reports
(:mod:`.ingest`), why each compile happened (:mod:`.reasons`), and how long runs and tombstones are kept
(:mod:`.retention`)."""

from __future__ import annotations

from cache_server.runs.model import MissRecord, RunFilter, RunInfo, RunNumbers, RunRecorded, RunTotals

__all__ = ["MissRecord", "RunFilter", "RunInfo", "RunNumbers", "RunRecorded", "RunTotals"]
