"""index: namespaces and entries

Revision ID: 0001
Revises:
Create Date: 2026-11-29 16:52:06.025993
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "namespaces",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("fingerprint", sa.JSON(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("hits", sa.BigInteger(), nullable=False),
        sa.Column("misses", sa.BigInteger(), nullable=False),
        sa.Column("uploads", sa.BigInteger(), nullable=False),
        sa.Column("bytes_served", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_namespaces")),
    )
    op.create_table(
        "entries",
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_access_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("hits", sa.BigInteger(), nullable=False),
        sa.Column("compile_time_ms", sa.Integer(), nullable=True),
        sa.Column("uploader", sa.String(length=256), nullable=True),
        sa.ForeignKeyConstraint(
            ["namespace"],
            ["namespaces.name"],
            name=op.f("fk_entries_namespace_namespaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("namespace", "key", name=op.f("pk_entries")),
    )
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.create_index("ix_entries_last_access_at", ["last_access_at"], unique=False)
        batch_op.create_index("ix_entries_namespace_hits", ["namespace", "hits"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.drop_index("ix_entries_namespace_hits")
        batch_op.drop_index("ix_entries_last_access_at")

    op.drop_table("entries")
    op.drop_table("namespaces")
