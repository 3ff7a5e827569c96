"""Run reports (issue 27): storing what each job reports (:mod:`.ingest`) within what a run may plausibly
count (:mod:`.plausible`) and store (:mod:`.budget`), and why each compile happened (:mod:`.reasons`,
:mod:`.variants`). The run vocabulary is :mod:`cache_server.domain.runs` (below the index, which stores it);
it is re-exported here."""

from __future__ import annotations

from cache_server.domain.runs import MissRecord, RunFilter, RunInfo, RunNumbers, RunRecorded, RunTotals

__all__ = ["MissRecord", "RunFilter", "RunInfo", "RunNumbers", "RunRecorded", "RunTotals"]
