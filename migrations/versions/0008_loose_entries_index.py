"""ix_entries_loose: the entries without a copy in a pack, in key order; ix_entries_pack without them

Packing later (``cache_server.admin.packing``) reads pages of the entries whose ``pack`` is NULL in
(namespace, key) order. With an index on ``pack`` holding every row, SQLite looked the NULL ones up there
and sorted all of them (the entries too large to pack among them) for each page. Now the two indexes are
partial and each row is in one: ``ix_entries_pack`` holds the rows pointing into a pack (gc's and a damaged
pack's lookups by id), ``ix_entries_loose`` the others by (namespace, key).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 21:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_entries_pack", table_name="entries")
    op.create_index(
        "ix_entries_pack",
        "entries",
        ["pack"],
        unique=False,
        sqlite_where=sa.text("pack IS NOT NULL"),
        postgresql_where=sa.text("pack IS NOT NULL"),
    )
    op.create_index(
        "ix_entries_loose",
        "entries",
        ["namespace", "key"],
        unique=False,
        sqlite_where=sa.text("pack IS NULL"),
        postgresql_where=sa.text("pack IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_entries_loose", table_name="entries")
    op.drop_index("ix_entries_pack", table_name="entries")
    op.create_index("ix_entries_pack", "entries", ["pack"], unique=False)
