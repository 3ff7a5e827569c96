"""runs, run misses and tombstones: every compile accounted for (issue 27)

``runs`` holds each job's run report (one row per run id, replaced by each later report of the same run),
``run_misses`` the keys a run compiled with what its client knew of them (module name, JAX cache-key
component hashes, a failed load), ``tombstones`` the entries removed (by eviction, deletion, purge or gc)
for a bounded time, so that a later compile of the key can be explained. New tables only.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 18:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("framework", sa.String(length=32), nullable=False),
        sa.Column("host", sa.String(length=256), nullable=False),
        sa.Column("process_index", sa.Integer(), nullable=False),
        sa.Column("reported_by", sa.String(length=32), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("warm_ms", sa.BigInteger(), nullable=False),
        sa.Column("warm_bytes", sa.BigInteger(), nullable=False),
        sa.Column("warm_entries", sa.BigInteger(), nullable=False),
        sa.Column("hits", sa.BigInteger(), nullable=False),
        sa.Column("misses", sa.BigInteger(), nullable=False),
        sa.Column("compile_ms", sa.BigInteger(), nullable=False),
        sa.Column("saved_ms", sa.BigInteger(), nullable=False),
        sa.Column("uploaded_entries", sa.BigInteger(), nullable=False),
        sa.Column("live_entries", sa.BigInteger(), nullable=False),
        sa.Column("load_failures", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_runs")),
    )
    op.create_index("ix_runs_namespace_started_at", "runs", ["namespace", "started_at"], unique=False)
    op.create_index("ix_runs_started_at", "runs", ["started_at"], unique=False)
    op.create_index("ix_runs_updated_at", "runs", ["updated_at"], unique=False)

    op.create_table(
        "run_misses",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("module", sa.String(length=256), nullable=True),
        sa.Column("components", sa.JSON(), nullable=True),
        sa.Column("compile_ms", sa.BigInteger(), nullable=True),
        sa.Column("load_failed", sa.Boolean(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.run_id"], name=op.f("fk_run_misses_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "key", name=op.f("pk_run_misses")),
    )
    op.create_index("ix_run_misses_namespace_module", "run_misses", ["namespace", "module"], unique=False)
    op.create_index("ix_run_misses_namespace_key", "run_misses", ["namespace", "key"], unique=False)

    op.create_table(
        "tombstones",
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("removed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("policy", sa.String(length=32), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("compile_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("namespace", "key", name=op.f("pk_tombstones")),
    )
    op.create_index("ix_tombstones_removed_at", "tombstones", ["removed_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_tombstones_removed_at", table_name="tombstones")
    op.drop_table("tombstones")
    op.drop_index("ix_run_misses_namespace_key", table_name="run_misses")
    op.drop_index("ix_run_misses_namespace_module", table_name="run_misses")
    op.drop_table("run_misses")
    op.drop_index("ix_runs_updated_at", table_name="runs")
    op.drop_index("ix_runs_started_at", table_name="runs")
    op.drop_index("ix_runs_namespace_started_at", table_name="runs")
    op.drop_table("runs")
