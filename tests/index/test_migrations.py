"""Alembic migrations create exactly what the models declare, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from cache_server.index.database import make_engine
from cache_server.index.migrate import downgrade, upgrade
from cache_server.index.models import Base
from cache_server.settings import Settings


def test_upgrade_matches_models_and_downgrade_empties(db_settings: Settings) -> None:
    upgrade(db_settings)
    engine = make_engine(db_settings)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
            assert {"namespaces", "entries", "alembic_version"} <= set(inspect(conn).get_table_names())
        downgrade(db_settings, "base")
        with engine.connect() as conn:
            assert set(inspect(conn).get_table_names()) <= {"alembic_version"}
        upgrade(db_settings)  # and back up again
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        engine.dispose()


def test_replicas_migrating_at_once_all_succeed(db_settings: Settings) -> None:
    """Several replicas (or workers) that run ``migrate`` at the same moment on a fresh database: each ends
    with the index at head and none fails (they take turns; the later ones find nothing to do)."""
    env = {**os.environ, "XLA_CACHE_DATABASE_URL": db_settings.resolved_database_url}
    env["XLA_CACHE_DATA_DIR"] = str(db_settings.data_dir)
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "cache_server", "migrate"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(4)
    ]
    outputs = [run.communicate(timeout=120)[0].decode(errors="replace") for run in runs]
    assert [run.returncode for run in runs] == [0] * 4, "\n---\n".join(outputs)
    engine = make_engine(db_settings)
    try:
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        engine.dispose()
