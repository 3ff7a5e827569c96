"""The plans SQLite chose for the statements a call ran: what a test checks to pin that a query can use an
index (a partial one only where the query names the index's own condition)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import event

from cache_server.index import Database

__all__ = ["sqlite_plans"]


def sqlite_plans(database: Database, call: Callable[[], object], keep: Callable[[str], bool]) -> list[str]:
    """``call`` run on ``database`` (SQLite), and for each statement it ran that ``keep`` accepts, the plan's
    details in one line (``EXPLAIN QUERY PLAN`` with the statement's own parameters), in the order run."""
    statements: list[tuple[str, Any]] = []

    def seen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if keep(statement):
            statements.append((statement, parameters))

    event.listen(database.engine, "before_cursor_execute", seen)
    try:
        call()
    finally:
        event.remove(database.engine, "before_cursor_execute", seen)
    with database.engine.connect() as conn:
        return [
            " ".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {s}", p).all())
            for s, p in statements
        ]
