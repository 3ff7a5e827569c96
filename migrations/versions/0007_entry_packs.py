"""entries.pack, entries.pack_offset: where a copy of an entry's bytes lies in a pack

A pack is one object holding copies of many small entries of a bulk upload (see
``cache_server.service.packs``), so that a bundle from a remote store reads them with a few ranged requests.
Both columns are NULL for an entry without a copy (every entry stored before this revision, and every entry of
a single PUT); the index on ``pack`` is for gc, which deletes the packs no row points into. Columns are added
in place (no table rebuild on SQLite, so the triggers of 0006 stay).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 08:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("entries", sa.Column("pack", sa.String(length=32), nullable=True))
    op.add_column("entries", sa.Column("pack_offset", sa.BigInteger(), nullable=True))
    op.create_index("ix_entries_pack", "entries", ["pack"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_entries_pack", table_name="entries")
    op.drop_column("entries", "pack_offset")  # in place on SQLite too (3.35 and newer): triggers stay
    op.drop_column("entries", "pack")
