"""entries.signer and entries.signature: each entry's Ed25519 signature by the job that compiled it (issue 28)

``signature`` is the wire form ``<key id>:<base64>`` (a batch's with its place and path: at most 800
characters, ``cache_protocol.signing.SIGNATURE_MAX_LENGTH``) as the uploader sent it (also kept in the blob's
metadata, so reindex restores it); ``signer`` its key id, indexed for the stats per signer and for purging a
leaked key's entries. Both NULL for an unsigned entry. Columns only: servers of the old version keep working.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 08:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("entries", sa.Column("signer", sa.String(length=16), nullable=True))
    op.add_column("entries", sa.Column("signature", sa.String(length=800), nullable=True))
    op.create_index("ix_entries_signer", "entries", ["signer"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_entries_signer", table_name="entries")
    with op.batch_alter_table("entries") as batch:
        batch.drop_column("signature")
        batch.drop_column("signer")
