"""runs.runtime: the components of JAX's cache key a run saw (issue 44, item 2)

A prefill compiles for a target it does not run on (this host's CPU for a CPU job, a TPU topology
deviceless); before it publishes into a namespace it compares the key components it computed (platform
version, topology, device ids and coordinates, flag digests, compression, whether the cache directory's path
enters the key) with those the namespace's latest real run reported, and refuses naming the one that
differs. A nullable JSON column added in place; runs reported before have none.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 06:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("runtime", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE runs DROP COLUMN runtime")
