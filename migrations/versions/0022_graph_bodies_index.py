"""ix_entry_graphs_bodies: a graph's rows with a body by the time they were parsed, for the latest bodies

The bucketing report (issue 46, item 8) reads the latest bodies of a module (up to 64) to find its baked
sizes and which modules make up one step, and counts how many it holds (up to 10,000). It found the latest
by joining every row of the module to ``entries`` and sorting them by upload time: at 1,000,000 entries on
PostgreSQL, 55 ms for a module of 16,000 entries, even for one body, and the count read the rows' bodies.
Now both are ranges of one partial index that holds only the rows with a body (``ops`` set: the rows
parsed since 0014): the latest parsed are its last keys, and the count reads the index alone.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 17:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_entry_graphs_bodies",
        "entry_graphs",
        ["namespace", "module", "parsed_at", "key"],
        unique=False,
        sqlite_where=sa.text("ops IS NOT NULL"),
        postgresql_where=sa.text("ops IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_entry_graphs_bodies", table_name="entry_graphs")
