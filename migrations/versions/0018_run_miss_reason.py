"""run_misses.reason: the reason a run's detail last gave each miss (issue 42, item 1)

A run's detail explained its first 1,000 misses on every request, to count their reasons, even with
``limit=0``: a few KiB of crafted entries made that 17 s of CPU. Now only the page asked for is explained,
each listed miss's reason is kept with its row, and the counts per reason are those kept reasons (a
``GROUP BY``, never explained again). A nullable column added in place; misses not listed yet have none.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07 03:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("run_misses", sa.Column("reason", sa.String(16), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE run_misses DROP COLUMN reason")
