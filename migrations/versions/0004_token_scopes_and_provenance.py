"""api_tokens.namespaces and entries.stored_by: scoped write tokens, and which token stored each entry

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 18:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("namespaces", sa.JSON(), nullable=True))
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stored_by", sa.String(length=32), nullable=True))
        batch_op.create_index("ix_entries_stored_by", ["stored_by"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.drop_index("ix_entries_stored_by")
        batch_op.drop_column("stored_by")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_column("namespaces")
