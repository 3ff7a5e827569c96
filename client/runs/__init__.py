"""Run reports (issue 27): what each job that warms tells the server about its run.

:class:`~client.runs.reporter.RunReporter` sends the reports; the collectors
(:mod:`client.runs.collectors`, :mod:`client.runs.jax_events`) read the framework's numbers and what it
knows of each compile. The wire contract is :mod:`cache_protocol.runs`.
"""

from __future__ import annotations

from client.runs.collectors import CompileCounts, MissFacts, RunCollector, collector_for
from client.runs.reporter import EXIT_SECONDS, Miss, RunReporter, Transfers, WarmFacts, reporter_for

__all__ = [
    "EXIT_SECONDS",
    "CompileCounts",
    "Miss",
    "MissFacts",
    "RunCollector",
    "RunReporter",
    "Transfers",
    "WarmFacts",
    "collector_for",
    "reporter_for",
]
