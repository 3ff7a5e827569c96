"""graph_counts.compile_ms: the compile ms recorded with each graph's entries, summed, kept by the triggers
that keep its counts; the bucketing report ranks a namespace's graphs by cost off its index

The cost ranking (issue 46, item 2) summed ``entries.compile_time_ms`` over every parsed entry of the
namespace asked (up to 50,000; past that it ranked by compiles and summed the graphs shown: a pass over the
namespace's entries, most of a second at 1,000,000 entries). The sum is now kept per graph, beside its
variants and entries, whoever writes:

- a graph's row inserted (parsing, reindex's rows parsed again): its entry's compile time is added (the
  entry is there: the foreign key; the upload wrote its compile time before the parser read it);
- a graph's row deleted while its entry stays: subtracted (the entry's row is read);
- an entry deleted (eviction, delete, purge, gc, a namespace's deletion): its compile time is subtracted
  before the row goes, by a row trigger on ``entries`` that reads its graph's row (the foreign key's
  cascade deletes the graph's row after the entry's, when the entry's compile time can no longer be read:
  the ``entry_graphs`` trigger then finds no entry and subtracts nothing);
- an entry's compile time changed (an upload that overwrites a stale row): the difference;
- a graph's row moved to another module (nothing does it today): moved with it.

PostgreSQL keeps 0013's statement triggers on ``entry_graphs`` (its functions replaced), and adds row
triggers on ``entries`` that do nothing for entries without a compile time. SQLite's 0013 triggers are
created again with the sum. The backfill sums every graph's entries once, after the triggers exist, in the
same transaction.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 08:00:00.000000
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def _ms_of(row: str) -> str:
    """SQL: the compile ms of the entry of ``entry_graphs`` row ``row`` (0 if it has none or is gone)."""
    return (
        f"COALESCE((SELECT c.compile_time_ms FROM entries c WHERE c.namespace = {row}.namespace "
        f"AND c.key = {row}.key), 0)"
    )


def _other_row(row: str, *, besides_itself: bool) -> str:
    """SQL: another ``entry_graphs`` row of the same namespace, module and signature as ``row`` holds."""
    besides = f" AND e.key <> {row}.key" if besides_itself else ""
    return (
        f"EXISTS (SELECT 1 FROM entry_graphs e WHERE e.namespace = {row}.namespace "
        f"AND e.module = {row}.module AND e.signature = {row}.signature{besides})"
    )


# the module of an entry's graph, for the triggers on entries
_MODULE_OF = "(SELECT g.module FROM entry_graphs g WHERE g.namespace = {r}.namespace AND g.key = {r}.key)"

_SQLITE_ADD = f"""
    INSERT INTO graph_counts (namespace, module, variants, entries, compile_ms)
    SELECT NEW.namespace, NEW.module,
        NEW.signature IS NOT NULL AND NOT {_other_row("NEW", besides_itself=True)}, 1, {_ms_of("NEW")}
    WHERE NEW.module IS NOT NULL
    ON CONFLICT (namespace, module) DO UPDATE
    SET variants = graph_counts.variants + excluded.variants, entries = graph_counts.entries + 1,
        compile_ms = graph_counts.compile_ms + excluded.compile_ms;
"""
_SQLITE_REMOVE = f"""
    UPDATE graph_counts SET entries = entries - 1,
        variants = variants - (OLD.signature IS NOT NULL AND NOT {_other_row("OLD", besides_itself=False)}),
        compile_ms = compile_ms - {_ms_of("OLD")}
    WHERE namespace = OLD.namespace AND module = OLD.module;
"""
_CHANGED = (
    "OLD.namespace IS DISTINCT FROM NEW.namespace OR OLD.module IS DISTINCT FROM NEW.module "
    "OR OLD.signature IS DISTINCT FROM NEW.signature"
)
_ENTRY_GONE = (
    "UPDATE graph_counts SET compile_ms = compile_ms - OLD.compile_time_ms "
    f"WHERE namespace = OLD.namespace AND module = {_MODULE_OF.format(r='OLD')}"
)
_ENTRY_CHANGED = (
    "UPDATE graph_counts SET compile_ms = compile_ms "
    "+ COALESCE(NEW.compile_time_ms, 0) - COALESCE(OLD.compile_time_ms, 0) "
    f"WHERE namespace = NEW.namespace AND module = {_MODULE_OF.format(r='NEW')}"
)

_SQLITE_TRIGGERS = ("graph_counts_insert", "graph_counts_delete", "graph_counts_update")
_SQLITE = [
    f"CREATE TRIGGER graph_counts_insert AFTER INSERT ON entry_graphs BEGIN {_SQLITE_ADD} END",
    f"CREATE TRIGGER graph_counts_delete AFTER DELETE ON entry_graphs BEGIN {_SQLITE_REMOVE} END",
    "CREATE TRIGGER graph_counts_update AFTER UPDATE OF namespace, module, signature ON entry_graphs WHEN "
    + _CHANGED.replace("IS DISTINCT FROM", "IS NOT")
    + f" BEGIN {_SQLITE_REMOVE} {_SQLITE_ADD} END",
    "CREATE TRIGGER graph_compile_ms_entry_delete BEFORE DELETE ON entries "
    f"WHEN OLD.compile_time_ms IS NOT NULL BEGIN {_ENTRY_GONE}; END",
    "CREATE TRIGGER graph_compile_ms_entry_update AFTER UPDATE OF compile_time_ms ON entries "
    f"WHEN OLD.compile_time_ms IS NOT NEW.compile_time_ms BEGIN {_ENTRY_CHANGED}; END",
]

# 0013's functions with the sum: the locks are taken in the same order as before (each touched row's
# first, in (namespace, module) order), the compile ms added with the entries.
_POSTGRESQL = [
    """
    CREATE OR REPLACE FUNCTION graph_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO graph_counts AS t (namespace, module, variants, entries, compile_ms)
        SELECT n.namespace, n.module, 0, count(*), COALESCE(sum(c.compile_time_ms), 0)
        FROM graph_counts_new n LEFT JOIN entries c ON c.namespace = n.namespace AND c.key = n.key
        WHERE n.module IS NOT NULL
        GROUP BY 1, 2 ORDER BY 1, 2
        ON CONFLICT (namespace, module) DO UPDATE
        SET entries = t.entries + excluded.entries, compile_ms = t.compile_ms + excluded.compile_ms;
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
    CREATE OR REPLACE FUNCTION graph_counts_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        g record;
    BEGIN
        -- an entry deleted took its compile ms off already (graph_compile_ms_entry_deleted): only the
        -- rows whose entry is still there subtract theirs
        FOR g IN
            SELECT o.namespace, o.module, count(*) AS n, COALESCE(sum(c.compile_time_ms), 0) AS ms
            FROM graph_counts_old o LEFT JOIN entries c ON c.namespace = o.namespace AND c.key = o.key
            WHERE o.module IS NOT NULL
            GROUP BY 1, 2 ORDER BY 1, 2
        LOOP
            UPDATE graph_counts SET entries = entries - g.n, compile_ms = compile_ms - g.ms
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
    CREATE OR REPLACE FUNCTION graph_counts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE graph_counts SET entries = entries - 1, compile_ms = compile_ms - {_ms_of("OLD")},
            variants = variants - CASE WHEN OLD.signature IS NOT NULL
                AND NOT {_other_row("OLD", besides_itself=False)} THEN 1 ELSE 0 END
        WHERE namespace = OLD.namespace AND module = OLD.module;
        IF NEW.module IS NOT NULL THEN
            INSERT INTO graph_counts AS t (namespace, module, variants, entries, compile_ms)
            VALUES (NEW.namespace, NEW.module, 0, 1, {_ms_of("NEW")})
            ON CONFLICT (namespace, module) DO UPDATE
            SET entries = t.entries + 1, compile_ms = t.compile_ms + excluded.compile_ms;
            UPDATE graph_counts SET variants = variants + CASE WHEN NEW.signature IS NOT NULL
                AND NOT {_other_row("NEW", besides_itself=True)} THEN 1 ELSE 0 END
            WHERE namespace = NEW.namespace AND module = NEW.module;
        END IF;
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE FUNCTION graph_compile_ms_entry_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        {_ENTRY_GONE};
        RETURN OLD;
    END $$
    """,
    f"""
    CREATE FUNCTION graph_compile_ms_entry_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        {_ENTRY_CHANGED};
        RETURN NULL;
    END $$
    """,
    "CREATE TRIGGER graph_compile_ms_entry_delete BEFORE DELETE ON entries FOR EACH ROW "
    "WHEN (OLD.compile_time_ms IS NOT NULL) EXECUTE FUNCTION graph_compile_ms_entry_deleted()",
    "CREATE TRIGGER graph_compile_ms_entry_update AFTER UPDATE OF compile_time_ms ON entries FOR EACH ROW "
    "WHEN (OLD.compile_time_ms IS DISTINCT FROM NEW.compile_time_ms) "
    "EXECUTE FUNCTION graph_compile_ms_entry_updated()",
]

_BACKFILL = (
    "UPDATE graph_counts SET compile_ms = COALESCE((SELECT sum(c.compile_time_ms) FROM entry_graphs g "
    "JOIN entries c ON c.namespace = g.namespace AND c.key = g.key "
    "WHERE g.namespace = graph_counts.namespace AND g.module = graph_counts.module), 0)"
)


def _graph_counts_0013() -> ModuleType:
    """Migration 0013's module: its triggers and functions, put back by the downgrade."""
    path = Path(__file__).with_name("0013_graph_counts.py")
    spec = importlib.util.spec_from_file_location("graph_counts_0013", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.add_column(
        "graph_counts", sa.Column("compile_ms", sa.BigInteger(), nullable=False, server_default="0")
    )
    # A namespace's graphs in the cost ranking's order (most compile ms, then most entries, then by name)
    op.create_index(
        "ix_graph_counts_cost",
        "graph_counts",
        ["namespace", sa.text("compile_ms DESC"), sa.text("entries DESC"), "module"],
        unique=False,
    )
    if not postgresql:
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    for statement in _POSTGRESQL if postgresql else _SQLITE:
        op.execute(statement)
    op.execute(_BACKFILL)


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name in ("delete", "update"):
        op.execute(
            f"DROP TRIGGER IF EXISTS graph_compile_ms_entry_{name}" + (" ON entries" if postgresql else "")
        )
    old = _graph_counts_0013()
    if postgresql:
        for name in ("deleted", "updated"):
            op.execute(f"DROP FUNCTION IF EXISTS graph_compile_ms_entry_{name}()")
        for statement in old._POSTGRESQL[:3]:  # the functions, as 0013 wrote them
            op.execute(statement.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    else:
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
        for statement in old._SQLITE:
            op.execute(statement)
    op.drop_index("ix_graph_counts_cost", table_name="graph_counts")
    op.execute("ALTER TABLE graph_counts DROP COLUMN compile_ms")
