"""graph_counts: shape variants (distinct signatures) and entries per namespace and module, kept by triggers
on entry_graphs; the bucketing report ranks a namespace's graphs off its index

``GET /admin/graphs`` ranked a namespace's graphs by counting the distinct signatures of every one of its
``entry_graphs`` rows (500,000 rows: most of a second). These rows are kept the way migration 0006 keeps
``entry_totals``: triggers in the transaction of every statement that inserts, deletes or changes a graph's
row (parsing, reindex, the foreign key's cascade from eviction, delete, purge, gc and a namespace's
deletion), whoever writes it. A signature is a new variant of its module when no other row of the module
holds it, and a variant is gone when no row holds it any more, each looked up in
``ix_entry_graphs_module_signature``.

Exact with writers at once: PostgreSQL first takes the lock of each touched ``graph_counts`` row (in
(namespace, module) order, as 0006 does), and only then looks for the other rows of each signature, in a
statement of its own whose snapshot sees whatever the writer it waited for committed; SQLite has one writer
at a time. PostgreSQL handles each statement's rows at once (statement triggers over transition tables; a
change of an existing row's module or signature, which nothing does today, is a row trigger); SQLite each
row.

The backfill runs after the triggers exist, in the same transaction (``CREATE TRIGGER`` holds off writes to
``entry_graphs`` on PostgreSQL until it commits).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 09:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def _other_row(row: str, *, besides_itself: bool) -> str:
    """SQL: another ``entry_graphs`` row of the same namespace, module and signature as ``row`` holds."""
    besides = f" AND e.key <> {row}.key" if besides_itself else ""
    return (
        f"EXISTS (SELECT 1 FROM entry_graphs e WHERE e.namespace = {row}.namespace "
        f"AND e.module = {row}.module AND e.signature = {row}.signature{besides})"
    )


_SQLITE_ADD = f"""
    INSERT INTO graph_counts (namespace, module, variants, entries)
    SELECT NEW.namespace, NEW.module,
        NEW.signature IS NOT NULL AND NOT {_other_row("NEW", besides_itself=True)}, 1
    WHERE NEW.module IS NOT NULL
    ON CONFLICT (namespace, module) DO UPDATE
    SET variants = graph_counts.variants + excluded.variants, entries = graph_counts.entries + 1;
"""
_SQLITE_REMOVE = f"""
    UPDATE graph_counts SET entries = entries - 1,
        variants = variants - (OLD.signature IS NOT NULL AND NOT {_other_row("OLD", besides_itself=False)})
    WHERE namespace = OLD.namespace AND module = OLD.module;
"""
_CHANGED = (
    "OLD.namespace IS DISTINCT FROM NEW.namespace OR OLD.module IS DISTINCT FROM NEW.module "
    "OR OLD.signature IS DISTINCT FROM NEW.signature"
)

_SQLITE = [
    f"CREATE TRIGGER graph_counts_insert AFTER INSERT ON entry_graphs BEGIN {_SQLITE_ADD} END",
    f"CREATE TRIGGER graph_counts_delete AFTER DELETE ON entry_graphs BEGIN {_SQLITE_REMOVE} END",
    "CREATE TRIGGER graph_counts_update AFTER UPDATE OF namespace, module, signature ON entry_graphs WHEN "
    + _CHANGED.replace("IS DISTINCT FROM", "IS NOT")
    + f" BEGIN {_SQLITE_REMOVE} {_SQLITE_ADD} END",
]

# First every touched row's lock, in (namespace, module) order; then the variants, in a later statement.
_POSTGRESQL = [
    """
    CREATE FUNCTION graph_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO graph_counts AS t (namespace, module, variants, entries)
        SELECT namespace, module, 0, count(*) FROM graph_counts_new WHERE module IS NOT NULL
        GROUP BY 1, 2 ORDER BY 1, 2
        ON CONFLICT (namespace, module) DO UPDATE SET entries = t.entries + excluded.entries;
        -- a signature is new when every row that holds it came with this statement
        UPDATE graph_counts t SET variants = t.variants + d.added
        FROM (
            SELECT s.namespace, s.module, count(*) AS added
            FROM (
                SELECT namespace, module, signature, count(*) AS n FROM graph_counts_new
                WHERE module IS NOT NULL AND signature IS NOT NULL GROUP BY 1, 2, 3
            ) s
            WHERE (
                SELECT count(*) FROM entry_graphs e
                WHERE e.namespace = s.namespace AND e.module = s.module AND e.signature = s.signature
            ) = s.n
            GROUP BY 1, 2
        ) d
        WHERE t.namespace = d.namespace AND t.module = d.module;
        RETURN NULL;
    END $$
    """,
    """
    CREATE FUNCTION graph_counts_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        g record;
    BEGIN
        FOR g IN
            SELECT namespace, module, count(*) AS n FROM graph_counts_old WHERE module IS NOT NULL
            GROUP BY 1, 2 ORDER BY 1, 2
        LOOP
            UPDATE graph_counts SET entries = entries - g.n
            WHERE namespace = g.namespace AND module = g.module;
        END LOOP;
        -- a variant is gone when no row holds its signature any more
        UPDATE graph_counts t SET variants = t.variants - d.gone
        FROM (
            SELECT s.namespace, s.module, count(*) AS gone
            FROM (
                SELECT DISTINCT namespace, module, signature FROM graph_counts_old
                WHERE module IS NOT NULL AND signature IS NOT NULL
            ) s
            WHERE NOT EXISTS (
                SELECT 1 FROM entry_graphs e
                WHERE e.namespace = s.namespace AND e.module = s.module AND e.signature = s.signature
            )
            GROUP BY 1, 2
        ) d
        WHERE t.namespace = d.namespace AND t.module = d.module;
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE FUNCTION graph_counts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE graph_counts SET entries = entries - 1,
            variants = variants - CASE WHEN OLD.signature IS NOT NULL
                AND NOT {_other_row("OLD", besides_itself=False)} THEN 1 ELSE 0 END
        WHERE namespace = OLD.namespace AND module = OLD.module;
        IF NEW.module IS NOT NULL THEN
            INSERT INTO graph_counts AS t (namespace, module, variants, entries)
            VALUES (NEW.namespace, NEW.module, 0, 1)
            ON CONFLICT (namespace, module) DO UPDATE SET entries = t.entries + 1;
            UPDATE graph_counts SET variants = variants + CASE WHEN NEW.signature IS NOT NULL
                AND NOT {_other_row("NEW", besides_itself=True)} THEN 1 ELSE 0 END
            WHERE namespace = NEW.namespace AND module = NEW.module;
        END IF;
        RETURN NULL;
    END $$
    """,
    "CREATE TRIGGER graph_counts_insert AFTER INSERT ON entry_graphs REFERENCING NEW TABLE "
    "AS graph_counts_new FOR EACH STATEMENT EXECUTE FUNCTION graph_counts_inserted()",
    "CREATE TRIGGER graph_counts_delete AFTER DELETE ON entry_graphs REFERENCING OLD TABLE "
    "AS graph_counts_old FOR EACH STATEMENT EXECUTE FUNCTION graph_counts_deleted()",
    "CREATE TRIGGER graph_counts_update AFTER UPDATE OF namespace, module, signature ON entry_graphs "
    f"FOR EACH ROW WHEN ({_CHANGED}) EXECUTE FUNCTION graph_counts_updated()",
]

_BACKFILL = (
    "INSERT INTO graph_counts (namespace, module, variants, entries) "
    "SELECT namespace, module, count(DISTINCT signature), count(*) FROM entry_graphs "
    "WHERE module IS NOT NULL GROUP BY 1, 2"
)


def upgrade() -> None:
    op.create_table(
        "graph_counts",
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("module", sa.String(length=256), nullable=False),
        sa.Column("variants", sa.BigInteger(), nullable=False),
        sa.Column("entries", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "module", name=op.f("pk_graph_counts")),
    )
    # A namespace's graphs in the report's order (most variants, then most entries, then by name)
    op.create_index(
        "ix_graph_counts_ranking",
        "graph_counts",
        ["namespace", sa.text("variants DESC"), sa.text("entries DESC"), "module"],
        unique=False,
    )
    for statement in _POSTGRESQL if op.get_bind().dialect.name == "postgresql" else _SQLITE:
        op.execute(statement)
    op.execute(_BACKFILL)


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name in ("insert", "delete", "update"):
        op.execute(f"DROP TRIGGER IF EXISTS graph_counts_{name}" + (" ON entry_graphs" if postgresql else ""))
    if postgresql:
        for name in ("inserted", "deleted", "updated"):
            op.execute(f"DROP FUNCTION IF EXISTS graph_counts_{name}()")
    op.drop_index("ix_graph_counts_ranking", table_name="graph_counts")
    op.drop_table("graph_counts")
