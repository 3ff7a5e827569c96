"""A change of an entry's compile time waits for its graph's insert in flight, and the insert for it
(PostgreSQL): a compile time recorded while the same entry's graph is parsed is no longer lost

0021 keeps ``graph_counts.compile_ms`` by two triggers: a graph's row inserted adds its entry's compile time
(read from ``entries``), an entry's compile time changed adds the difference to its graph (found in
``entry_graphs``). Under PostgreSQL's read committed, an upload that overwrites an entry's row (its compile
time X -> Y) and the parser's insert of that entry's graph, both in flight, each saw the other's table as it
was before: the insert added X, the update found no graph row and added nothing, and the graph kept X where
its entry said Y.

The insert already takes a key-share lock on its entry's row (the foreign key's check, before the insert's
statement trigger reads the compile times). Now the compile-time trigger takes the row's exclusive lock
(``FOR UPDATE``), which conflicts with it, before it reads: whichever comes second waits for the first to
commit, and its next statement sees what the first wrote. Nothing else waits more than before: only an
update that changes a compile time fires that trigger (not the access counters' flush, not packing, whose
updates keep taking the lock that a key-share lock allows), and no lock is added to the parser's inserts.
SQLite writes one transaction at a time: its triggers are unchanged.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07 18:00:00.000000
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_EXCLUSIVE = """
        -- the entry's row locked as a key change would lock it: a graph of it being recorded (the insert's
        -- foreign key holds a key-share lock) is waited for, then found by the statement below
        PERFORM 1 FROM entries WHERE namespace = NEW.namespace AND key = NEW.key FOR UPDATE;
"""


def _compile_ms_0021() -> ModuleType:
    """Migration 0021's module: its function, which this one extends and the downgrade puts back."""
    path = Path(__file__).with_name("0021_graph_compile_ms.py")
    spec = importlib.util.spec_from_file_location("graph_compile_ms_0021", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _updated_0021() -> str:
    """0021's graph_compile_ms_entry_updated(), as it created it (to be replaced)."""
    statements = _compile_ms_0021()._POSTGRESQL
    (updated,) = [s for s in statements if "CREATE FUNCTION graph_compile_ms_entry_updated()" in s]
    return str(updated).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    function = _updated_0021()
    begin = "    BEGIN\n"
    assert function.count(begin) == 1, "0021's function changed shape"
    op.execute(function.replace(begin, begin + _EXCLUSIVE, 1))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_updated_0021())
