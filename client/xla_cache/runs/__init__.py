"""Run reports (issue 27): what each job that warms tells the server about its run.

:class:`~xla_cache.runs.reporter.RunReporter` sends the reports; the collectors
(:mod:`xla_cache.runs.collectors`, :mod:`xla_cache.runs.jax_events`) read the framework's numbers and what it
knows of each compile. The wire contract is :mod:`cache_protocol.runs`. :mod:`xla_cache.runs.process` holds
this process's warm and what it left running for the job (the uploader, the follower, the run reporter):
``xla_cache.flush``, ``stop`` and ``run_report``.
"""

from __future__ import annotations

from xla_cache.runs.choice import collector_for
from xla_cache.runs.collectors import CompileCounts, MissFacts, RunCollector
from xla_cache.runs.reporter import EXIT_SECONDS, Miss, RunReporter, Transfers, WarmFacts, reporter_for

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
