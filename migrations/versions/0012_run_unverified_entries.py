"""runs.unverified_entries: the entries a run skipped because no key it trusts signed them (issue 28)

A job configured with trusted keys (``XLA_CACHE_TRUSTED_KEYS``) places only entries they signed; the warm
and the follower count the rest, and the run report carries that count beside its load failures. A column
with a server default: servers of the old version keep working.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 09:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "runs", sa.Column("unverified_entries", sa.BigInteger(), nullable=False, server_default=sa.text("0"))
    )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("unverified_entries")
