"""A namespace's row and the entries written under it, on SQLite and PostgreSQL (issue 42, item 4): the row
is dropped only when no entry is under it, and an entry written while a delete drops the row is stored
under a row made anew, never lost with the row (the foreign key cascades) nor a 500."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import delete, select, text

from cache_server.domain import utcnow
from cache_server.index import AdminRepository, Database, EntryRepository
from cache_server.index.models import Namespace
from cache_server.index.namespaces import NamespaceRepository
from tests.support.entry_records import record
from tests.support.wait import wait_until


def waiting_for_a_lock(database: Database) -> int:
    """How many sessions of this database wait for a lock (asked afresh: a transaction sees one snapshot
    of the activity)."""
    with database.engine.connect() as connection:
        query = text(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(connection.execute(query).scalar_one())


def test_the_row_of_a_namespace_holding_entries_stays(database: Database) -> None:
    entries, admin = EntryRepository(database), AdminRepository(database)
    entries.record_new_entries([record("ns", "k1", 10), record("ns", "k2", 20)])
    assert not admin.drop_namespace_row("ns")
    assert entries.get_entry("ns", "k1") is not None
    admin.delete_entries([("ns", "k1"), ("ns", "k2")], policy="namespace_deleted", when=utcnow())
    assert admin.drop_namespace_row("ns")
    assert NamespaceRepository(database).get_namespace("ns") is None
    assert not admin.drop_namespace_row("ns")  # gone already


# PostgreSQL only: SQLite runs one writer at a time, so the row cannot go between an upload's statements
@pytest.mark.parametrize("migrated_settings", ["postgresql"], indirect=True)
def test_an_entry_written_while_its_namespace_row_is_dropped_is_kept(database: Database) -> None:
    entries = EntryRepository(database)
    entries.record_new_entries([record("ns", "old", 1)])
    AdminRepository(database).delete_entries([("ns", "old")], policy="namespace_deleted", when=utcnow())
    failures: list[BaseException] = []

    def upload() -> None:
        try:
            entries.record_new_entries([record("ns", "new", 5)])
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    with database.engine.connect() as deleting:  # a namespace's delete, as drop_namespace_row runs it
        deleting.execute(select(Namespace.name).where(Namespace.name == "ns").with_for_update())
        writer = threading.Thread(target=upload)
        writer.start()
        # the upload's entry waits for the row (its foreign key's check) while the delete holds it
        wait_until(lambda: waiting_for_a_lock(database), message="the upload never waited for the row")
        deleting.execute(delete(Namespace).where(Namespace.name == "ns"))
        deleting.commit()
        writer.join(30)
    assert not failures, failures
    assert entries.get_entry("ns", "new") is not None
    namespace = NamespaceRepository(database).get_namespace("ns")
    assert namespace is not None and namespace.entries == 1
