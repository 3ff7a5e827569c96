"""The quota queries (migration 0009) and the paged namespace listing of stats, on SQLite and PostgreSQL."""

from __future__ import annotations

from cache_server.domain import utcnow
from cache_server.index import AdminRepository, Database, EntryRepository
from cache_server.index.namespaces import NamespaceRepository
from cache_server.index.quotas import NAMESPACE, TOKEN, QuotaRepository, QuotaRow
from tests.support.entry_records import record


def test_quotas_are_set_listed_removed_and_compared_with_usage(database: Database) -> None:
    entries, quotas = EntryRepository(database), QuotaRepository(database)
    now = utcnow()
    assert quotas.set_quota(NAMESPACE, "a", max_entries=2, max_bytes=None, now=now) == QuotaRow(
        NAMESPACE, "a", 2, None, 0, 0
    )
    quotas.set_quota(TOKEN, "t1", max_entries=None, max_bytes=500, now=now)
    entries.record_new_entries([record("a", f"k{i}", 10, "t1") for i in range(3)])
    entries.record_entry(record("b", "k", 70, "t1"), replace=True)
    entries.record_entry(record("a", "other", 5, "t2"), replace=True)
    assert quotas.quotas() == [
        QuotaRow(NAMESPACE, "a", 2, None, 4, 35),
        QuotaRow(TOKEN, "t1", None, 500, 4, 100),
    ]

    usage = quotas.upload_usage("a", "t1", count_created=True)
    assert set(usage.quotas) == set(quotas.quotas()) and usage.namespace_exists
    assert quotas.upload_usage("a", None, count_created=True).quotas == (
        QuotaRow(NAMESPACE, "a", 2, None, 4, 35),
    )
    assert quotas.upload_usage("c", "t3", count_created=True).quotas == ()

    # usage follows deletes (the totals the triggers keep), across the token's namespaces
    AdminRepository(database).delete_entries([("b", "k"), ("a", "k0")], policy="admin", when=utcnow())
    assert quotas.quotas([(TOKEN, "t1")]) == [QuotaRow(TOKEN, "t1", None, 500, 2, 20)]
    # replaced, then removed by giving no limit
    quotas.set_quota(NAMESPACE, "a", max_entries=None, max_bytes=1000, now=now)
    assert quotas.quotas([(NAMESPACE, "a")]) == [QuotaRow(NAMESPACE, "a", None, 1000, 3, 25)]
    quotas.set_quota(NAMESPACE, "a", max_entries=None, max_bytes=None, now=now)
    assert quotas.quotas([(NAMESPACE, "a")]) == []


def test_namespaces_created_by_a_token_are_counted(database: Database) -> None:
    entries, quotas = EntryRepository(database), QuotaRepository(database)
    now = utcnow()
    namespaces = NamespaceRepository(database)
    namespaces.upsert_namespace("r1", {}, {}, now=now, created_by="t1")
    namespaces.upsert_namespace("r1", {"x": 1}, {}, now=now, created_by="t2")  # an update: not the creator
    entries.record_entry(record("s1", "k", 1, "t1"), replace=True)  # created by storing its first entry
    entries.record_new_entries([record("s2", "k", 1, "t1")])
    entries.record_entry(record("s3", "k", 1), replace=True)  # auth off
    assert quotas.namespaces_created_by("t1") == 3
    assert quotas.namespaces_created_by("t2") == 0
    fresh = quotas.upload_usage("new", "t1", count_created=True)
    assert (fresh.namespace_exists, fresh.namespaces_created) == (False, 3)
    assert quotas.upload_usage("r1", "t1", count_created=True).namespaces_created == 0  # exists: not read


def test_stats_pages_hold_every_namespace_once_largest_first(database: Database) -> None:
    entries, admin = EntryRepository(database), AdminRepository(database)
    now = utcnow()
    for i in range(120):
        NamespaceRepository(database).upsert_namespace(f"ns{i:03d}", {}, {}, now=now)
    entries.record_entry(record("ns005", "k", 50), replace=True)
    entries.record_new_entries([record("ns100", f"k{i}", 30) for i in range(2)])
    entries.record_entry(record("ns050", "k", 60), replace=True)  # as large as ns100: by name between them
    pages: list[list[str]] = []
    after: tuple[int, str] | None = None
    while True:
        page = admin.namespace_page(after=after, limit=25)
        if not page:
            break
        pages.append([ns.name for ns in page])
        after = (page[-1].bytes, page[-1].name)
    names = [name for page in pages for name in page]
    assert [len(page) for page in pages] == [25, 25, 25, 25, 20]
    assert names == [ns.name for ns in admin.namespace_rows()]
    assert names[:3] == ["ns050", "ns100", "ns005"] and len(set(names)) == 120
    count, stored, size, counters = admin.namespace_totals()
    assert (count, stored, size, counters.uploads) == (120, 4, 170, 4)
    assert admin.namespace_totals("ns100")[:3] == (1, 2, 60)
    assert [ns.name for ns in admin.namespace_page(after=None, limit=5, namespace="ns100")] == ["ns100"]
