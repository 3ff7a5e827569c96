"""ix_entries_prefilled: the entries a prefill stored, by namespace, for the graphs report's counts

The graphs report (``GET /admin/graphs``) says how many of a namespace's entries a prefill stored and how
many of those unverified (issue 44: their ``uploader`` starts with ``prefill``). It counted them in one pass
over all of the namespace's rows: 80 ms for a namespace of 500,000 entries on PostgreSQL, on every report.
Now the count reads a partial index that holds only the prefilled entries (with their uploader, so the
unverified ones are counted off it too): nothing for a namespace no prefill wrote to.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07 17:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

PREFILLED = "uploader LIKE 'prefill %'"  # cache_server.index.models.PREFILLED as of this revision


def upgrade() -> None:
    op.create_index(
        "ix_entries_prefilled",
        "entries",
        ["namespace", "uploader"],
        unique=False,
        sqlite_where=sa.text(PREFILLED),
        postgresql_where=sa.text(PREFILLED),
    )


def downgrade() -> None:
    op.drop_index("ix_entries_prefilled", table_name="entries")
