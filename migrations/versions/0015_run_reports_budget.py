"""api_tokens.metrics_off and ix_runs_reported_by: run reports bounded (issue 36, item 2)

api_tokens.metrics_off: a token whose run reports are stored but not counted in the metrics.

One uploader could move the fleet-wide ``xla_cache_run_*`` counters as far as it liked. The counters now
count what is plausible for each run (``cache_server.runs.plausible``), and an operator can turn one
token's reports off for the metrics (``xla-cache-server token metrics NAME off``) without losing its runs.
A column with a server default: servers of the old version keep working. And an index of runs by the
token that reported them: what a token's runs keep counts against its budget when a report arrives
(``cache_server.runs.budget``).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 11:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "api_tokens", sa.Column("metrics_off", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.create_index("ix_runs_reported_by", "runs", ["reported_by"])


def downgrade() -> None:
    op.drop_index("ix_runs_reported_by", table_name="runs")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("metrics_off")
