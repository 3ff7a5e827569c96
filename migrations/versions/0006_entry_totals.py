"""entry_totals: entries and bytes stored per namespace and token, kept by triggers on entries; the
manifest's order and top graphs' ranking as indexes

Stats, the stored-bytes gauges and the budgets read these few rows instead of counting every entry. The
triggers run in the transaction of each statement that inserts, deletes or changes an entry (whoever writes
it), with atomic ``SET entries = entries + d`` updates, so concurrent writers never lose a count. PostgreSQL
sums each statement's rows once (statement triggers over transition tables; a change of an existing row's
size or token, rare, is a row trigger); SQLite, which has only row triggers, counts each row.

The backfill runs after the triggers exist, in the same transaction; on PostgreSQL ``CREATE TRIGGER`` holds
off writes to ``entries`` until it commits, so no entry is counted twice or missed.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 22:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_ADD_ONE = """
    INSERT INTO entry_totals (namespace, stored_by, entries, bytes)
    VALUES (NEW.namespace, COALESCE(NEW.stored_by, ''), 1, NEW.size)
    ON CONFLICT (namespace, stored_by)
    DO UPDATE SET entries = entry_totals.entries + 1, bytes = entry_totals.bytes + excluded.bytes;
"""
_REMOVE_ONE = """
    UPDATE entry_totals SET entries = entries - 1, bytes = bytes - OLD.size
    WHERE namespace = OLD.namespace AND stored_by = COALESCE(OLD.stored_by, '');
"""
_CHANGED = (
    "OLD.namespace IS DISTINCT FROM NEW.namespace OR OLD.stored_by IS DISTINCT FROM NEW.stored_by "
    "OR OLD.size IS DISTINCT FROM NEW.size"
)

_SQLITE = [
    f"CREATE TRIGGER entry_totals_insert AFTER INSERT ON entries BEGIN {_ADD_ONE} END",
    f"CREATE TRIGGER entry_totals_delete AFTER DELETE ON entries BEGIN {_REMOVE_ONE} END",
    "CREATE TRIGGER entry_totals_update AFTER UPDATE OF namespace, stored_by, size ON entries WHEN "
    + _CHANGED.replace("IS DISTINCT FROM", "IS NOT")
    + f" BEGIN {_REMOVE_ONE} {_ADD_ONE} END",
]

# Groups are written in (namespace, stored_by) order, so two statements lock shared rows in one order.
_POSTGRESQL = [
    """
    CREATE FUNCTION entry_totals_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO entry_totals AS t (namespace, stored_by, entries, bytes)
        SELECT namespace, COALESCE(stored_by, ''), count(*), sum(size) FROM entry_totals_new
        GROUP BY 1, 2 ORDER BY 1, 2
        ON CONFLICT (namespace, stored_by)
        DO UPDATE SET entries = t.entries + excluded.entries, bytes = t.bytes + excluded.bytes;
        RETURN NULL;
    END $$
    """,
    """
    CREATE FUNCTION entry_totals_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        g record;
    BEGIN
        FOR g IN
            SELECT namespace, COALESCE(stored_by, '') AS stored_by, count(*) AS n, sum(size) AS b
            FROM entry_totals_old GROUP BY 1, 2 ORDER BY 1, 2
        LOOP
            UPDATE entry_totals SET entries = entries - g.n, bytes = bytes - g.b
            WHERE namespace = g.namespace AND stored_by = g.stored_by;
        END LOOP;
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE FUNCTION entry_totals_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        {_REMOVE_ONE}
        {_ADD_ONE}
        RETURN NULL;
    END $$
    """,
    "CREATE TRIGGER entry_totals_insert AFTER INSERT ON entries REFERENCING NEW TABLE AS entry_totals_new "
    "FOR EACH STATEMENT EXECUTE FUNCTION entry_totals_inserted()",
    "CREATE TRIGGER entry_totals_delete AFTER DELETE ON entries REFERENCING OLD TABLE AS entry_totals_old "
    "FOR EACH STATEMENT EXECUTE FUNCTION entry_totals_deleted()",
    "CREATE TRIGGER entry_totals_update AFTER UPDATE OF namespace, stored_by, size ON entries FOR EACH ROW "
    f"WHEN ({_CHANGED}) EXECUTE FUNCTION entry_totals_updated()",
]

_BACKFILL = (
    "INSERT INTO entry_totals (namespace, stored_by, entries, bytes) "
    "SELECT namespace, COALESCE(stored_by, ''), count(*), sum(size) FROM entries GROUP BY 1, 2"
)


def upgrade() -> None:
    op.create_table(
        "entry_totals",
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("stored_by", sa.String(length=32), nullable=False),
        sa.Column("entries", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "stored_by", name=op.f("pk_entry_totals")),
    )
    for statement in _POSTGRESQL if op.get_bind().dialect.name == "postgresql" else _SQLITE:
        op.execute(statement)
    op.execute(_BACKFILL)
    # The manifest's whole order (most hits, then most recently used, then key): read off the index, never
    # sorted. It replaces (namespace, hits), which only led the order.
    op.drop_index("ix_entries_namespace_hits", table_name="entries")
    op.create_index(
        "ix_entries_manifest_order",
        "entries",
        ["namespace", sa.text("hits DESC"), sa.text("last_access_at DESC"), "key"],
        unique=False,
    )
    # Top graphs are ranked by distinct signatures per module: this index alone answers that.
    op.drop_index("ix_entry_graphs_namespace_module", table_name="entry_graphs")
    op.create_index(
        "ix_entry_graphs_module_signature", "entry_graphs", ["namespace", "module", "signature"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_entry_graphs_module_signature", table_name="entry_graphs")
    op.create_index("ix_entry_graphs_namespace_module", "entry_graphs", ["namespace", "module"], unique=False)
    op.drop_index("ix_entries_manifest_order", table_name="entries")
    op.create_index("ix_entries_namespace_hits", "entries", ["namespace", "hits"], unique=False)
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name in ("insert", "delete", "update"):
        op.execute(f"DROP TRIGGER IF EXISTS entry_totals_{name}" + (" ON entries" if postgresql else ""))
    if postgresql:
        for name in ("inserted", "deleted", "updated"):
            op.execute(f"DROP FUNCTION IF EXISTS entry_totals_{name}()")
    op.drop_table("entry_totals")
