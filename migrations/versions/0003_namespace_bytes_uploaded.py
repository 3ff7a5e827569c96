"""namespaces.bytes_uploaded: every counter of the daily rollup is kept per namespace too

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 15:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("namespaces", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("bytes_uploaded", sa.BigInteger(), server_default=sa.text("0"), nullable=False)
        )
    # What the rollup already counted (it has every upload since it was added).
    op.execute(
        "UPDATE namespaces SET bytes_uploaded = COALESCE((SELECT SUM(daily_stats.bytes_uploaded) "
        "FROM daily_stats WHERE daily_stats.namespace = namespaces.name), 0)"
    )


def downgrade() -> None:
    with op.batch_alter_table("namespaces", schema=None) as batch_op:
        batch_op.drop_column("bytes_uploaded")
