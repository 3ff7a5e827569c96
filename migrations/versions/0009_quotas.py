"""quotas: byte and entry limits per namespace and per token; who created each namespace

An upload is compared with the ``entry_totals`` rows (migration 0006) before anything of it is stored
(``cache_server.service.quotas``). A namespace's usage is the sum of its few rows (one per token that stored
into it); a token's is the sum of its rows, one per namespace it stored into, found by the new index on
``entry_totals.stored_by``. A per-token total kept by triggers (as 0006 keeps the namespace's) was weighed
and left out: every change of ``entry_totals`` would also lock one row per token (the no-token row shared by
every upload with auth off), and an eviction across namespaces locks those rows in another order than an
upload does: a deadlock on PostgreSQL. ``XLA_CACHE_MAX_NAMESPACES_PER_TOKEN`` bounds how many rows a token's
sum reads; ``namespaces.created_by`` is what it counts.

``namespaces`` gains its column with a plain ``ADD COLUMN`` (no table rebuild: on SQLite a rebuild of
``namespaces`` would delete every entry through the foreign key's cascade); the downgrade drops it the same
way (SQLite 3.35 or later).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 15:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quotas",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=128), nullable=False),
        sa.Column("max_entries", sa.BigInteger(), nullable=True),
        sa.Column("max_bytes", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("kind", "subject", name=op.f("pk_quotas")),
    )
    op.create_index("ix_entry_totals_stored_by", "entry_totals", ["stored_by"], unique=False)
    op.add_column("namespaces", sa.Column("created_by", sa.String(length=32), nullable=True))
    op.create_index("ix_namespaces_created_by", "namespaces", ["created_by"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_namespaces_created_by", table_name="namespaces")
    op.execute("ALTER TABLE namespaces DROP COLUMN created_by")
    op.drop_index("ix_entry_totals_stored_by", table_name="entry_totals")
    op.drop_table("quotas")
