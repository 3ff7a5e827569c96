"""entry_feed (the change feed followers read) and the live-delivery counters

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 19:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_COUNTERS = ("live_deliveries", "live_compile_ms_saved")


def upgrade() -> None:
    op.create_table(
        "entry_feed",
        sa.Column(
            "seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.ForeignKeyConstraint(
            ["namespace", "key"],
            ["entries.namespace", "entries.key"],
            name=op.f("fk_entry_feed_namespace_entries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_entry_feed")),
    )
    op.create_index("ix_entry_feed_namespace_seq", "entry_feed", ["namespace", "seq"], unique=False)
    for table in ("namespaces", "daily_stats"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name in _COUNTERS:
                batch_op.add_column(
                    sa.Column(name, sa.BigInteger(), server_default=sa.text("0"), nullable=False)
                )


def downgrade() -> None:
    for table in ("daily_stats", "namespaces"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name in _COUNTERS:
                batch_op.drop_column(name)
    op.drop_index("ix_entry_feed_namespace_seq", table_name="entry_feed")
    op.drop_table("entry_feed")
