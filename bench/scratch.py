"""A server's parts over a scratch index and local store, for the benchmarks that run in process
(bench/eviction.py, bench/incident.py): the arguments they share and the services they time."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cache_server.index.migrate import upgrade
from cache_server.settings import Settings
from cache_server.wiring import Services, build_services

__all__ = ["scratch_arguments", "scratch_services"]


def scratch_arguments(parser: argparse.ArgumentParser) -> None:
    """``--entries`` (default 100,000) and ``--database-url`` (default: SQLite in the scratch directory)."""
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--database-url", default="", help="default: SQLite in a temporary directory")


@contextmanager
def scratch_services(database_url: str) -> Iterator[Services]:
    """Every part of a server over a migrated index at ``database_url`` (empty: SQLite) and a local store
    in a temporary directory, removed afterwards; says which index and how many CPUs first."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), database_url=database_url)
        upgrade(settings)
        services = build_services(settings)
        try:
            url = settings.resolved_database_url
            where = "SQLite" if url.startswith("sqlite") else url.split("@")[-1].split("/")[0]
            print(f"index: {where}, store: local directory, CPUs: {os.cpu_count()}")
            yield services
        finally:
            services.stop()
