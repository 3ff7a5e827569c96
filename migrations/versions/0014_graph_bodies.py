"""entry_graphs keeps what a graph computes beyond its shapes: the digests of its structure, its program and
its whole module, and its sized ops (issue 33: sizes baked into graphs)

A job that slices or pads by Python integers compiles one graph per size at the same input shapes. Entries
of one structure are such a graph at other sizes; their sized ops (slice limits, pad widths, iota lengths,
literals...) say which sizes differ (``cache_server.parsing.instructions``). Nullable columns, added in place
(no table rebuild: the triggers of 0013 stay): rows parsed before this revision have none, and the graph
indexer parses them again in the background.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 01:45:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_COLUMNS = ("structure", "program", "whole")


def upgrade() -> None:
    for name in _COLUMNS:
        op.add_column("entry_graphs", sa.Column(name, sa.String(32), nullable=True))
    op.add_column("entry_graphs", sa.Column("ops", sa.Text(), nullable=True))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN on both dialects (SQLite 3.35+): no rebuild, so 0013's triggers stay
    for name in (*_COLUMNS, "ops"):
        op.execute(f"ALTER TABLE entry_graphs DROP COLUMN {name}")
