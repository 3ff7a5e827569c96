"""graph_counts_inserted() locks the new graph rows' entries before it reads their compile times
(PostgreSQL): a compile time recorded while the same entry's graph is parsed is no longer lost

0021 keeps ``graph_counts.compile_ms`` by two triggers: a graph's row inserted adds its entry's compile time
(read from ``entries``), an entry's compile time changed adds the difference to its graph (found in
``entry_graphs``). Under PostgreSQL's read committed, an upload that overwrites an entry's row (its compile
time X -> Y) and the parser's insert of that entry's graph, both in flight, each saw the other's table as it
was before: the insert added X, the update found no graph row and added nothing, and the graph kept X where
its entry said Y. Now the insert's trigger takes a share lock on the entries it reads (in key order) before
reading them: it waits for an update in flight and then reads its value, and an update that comes after
waits for the insert to commit, then finds the graph's row. SQLite writes one transaction at a time: its
triggers are unchanged.

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

_LOCK = """
        -- the entries whose compile times are read below, locked first (in key order: no deadlock
        -- between two such inserts), so an update of one in flight is waited for and read once committed
        PERFORM 1 FROM entries c JOIN graph_counts_new n ON c.namespace = n.namespace AND c.key = n.key
        WHERE n.module IS NOT NULL
        ORDER BY c.namespace, c.key
        FOR SHARE OF c;
"""


def _compile_ms_0021() -> ModuleType:
    """Migration 0021's module: its function, which this one extends and the downgrade puts back."""
    path = Path(__file__).with_name("0021_graph_compile_ms.py")
    spec = importlib.util.spec_from_file_location("graph_compile_ms_0021", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inserted_0021() -> str:
    (function,) = [s for s in _compile_ms_0021()._POSTGRESQL if "graph_counts_inserted()" in s]
    return str(function)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    function = _inserted_0021()
    begin = "    BEGIN\n"
    assert function.count(begin) == 1, "0021's graph_counts_inserted() changed shape"
    op.execute(function.replace(begin, begin + _LOCK, 1))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_inserted_0021())
