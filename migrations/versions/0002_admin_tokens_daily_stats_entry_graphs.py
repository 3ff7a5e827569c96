"""admin: tokens, daily stats, entry graphs, eviction counters

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 17:00:24.310788
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_tokens_name"), ["name"], unique=False)

    op.create_table(
        "daily_stats",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("hits", sa.BigInteger(), nullable=False),
        sa.Column("misses", sa.BigInteger(), nullable=False),
        sa.Column("uploads", sa.BigInteger(), nullable=False),
        sa.Column("evictions", sa.BigInteger(), nullable=False),
        sa.Column("bytes_served", sa.BigInteger(), nullable=False),
        sa.Column("bytes_uploaded", sa.BigInteger(), nullable=False),
        sa.Column("compile_ms_saved", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day", "namespace", name=op.f("pk_daily_stats")),
    )
    op.create_table(
        "entry_graphs",
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("module", sa.String(length=256), nullable=True),
        sa.Column("signature", sa.String(length=64), nullable=True),
        sa.Column("shapes", sa.Text(), nullable=True),
        sa.Column("source", sa.String(length=512), nullable=True),
        sa.Column("parsed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["namespace", "key"],
            ["entries.namespace", "entries.key"],
            name=op.f("fk_entry_graphs_namespace_entries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("namespace", "key", name=op.f("pk_entry_graphs")),
    )
    with op.batch_alter_table("entry_graphs", schema=None) as batch_op:
        batch_op.create_index("ix_entry_graphs_namespace_module", ["namespace", "module"], unique=False)

    with op.batch_alter_table("namespaces", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("evictions", sa.BigInteger(), server_default=sa.text("0"), nullable=False)
        )
        batch_op.add_column(
            sa.Column("compile_ms_saved", sa.BigInteger(), server_default=sa.text("0"), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("namespaces", schema=None) as batch_op:
        batch_op.drop_column("compile_ms_saved")
        batch_op.drop_column("evictions")

    with op.batch_alter_table("entry_graphs", schema=None) as batch_op:
        batch_op.drop_index("ix_entry_graphs_namespace_module")

    op.drop_table("entry_graphs")
    op.drop_table("daily_stats")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_name"))

    op.drop_table("api_tokens")
