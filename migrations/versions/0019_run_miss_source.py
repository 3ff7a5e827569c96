"""run_misses.source: where the job compiled each miss (issue 46, item 4)

torch_xla names its entries by a hash and puts source lines into a graph only with ``XLA_HLO_DEBUG=1``,
which gives every graph another key. The client now records where each compile happened with no setting
(the call site of the ``mark_step()``/``sync()`` that compiled it, ``train.py:57``) and reports it with the
miss; the graphs report and a run's detail name it. A nullable column added in place: misses reported
before have none.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 06:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("run_misses", sa.Column("source", sa.String(200), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE run_misses DROP COLUMN source")
