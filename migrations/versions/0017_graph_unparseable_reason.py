"""entry_graphs.unparseable: why an entry's graph could not be read (issue 36, item 3)

An entry that breaks a bound of the parser (shapes nested too deep, too many repeated fields, a module
past its inflated size) or kills or stalls the parser's process is recorded as unparseable, so that it
never holds up later entries. The reason was only logged; it is now kept with the row, and
``GET /admin/graphs`` counts a namespace's unparseable entries by reason. A nullable column added in place
(no table rebuild: the triggers of 0013 stay); rows recorded before it have none.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 12:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("entry_graphs", sa.Column("unparseable", sa.String(256), nullable=True))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN on both dialects (SQLite 3.35+): no rebuild, so 0013's triggers stay
    op.execute("ALTER TABLE entry_graphs DROP COLUMN unparseable")
