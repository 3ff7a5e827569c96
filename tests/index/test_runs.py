"""The run queries on SQLite and PostgreSQL: a report merged by max, misses bounded and ordered, listings
filtered (a scoped token's patterns too), runs and tombstones pruned by age and count, the facts a reason
reads."""

from __future__ import annotations

import datetime as dt

import pytest

from cache_server.admin.history import prune_history
from cache_server.domain import utcnow
from cache_server.domain.runs import MissRecord, RunFilter, RunInfo, RunNumbers, RunRecorded
from cache_server.errors import RunConflict, RunOwned
from cache_server.index import AdminRepository, Database, EntryRepository
from cache_server.index.graph_records import GraphRecord, GraphRepository
from cache_server.index.miss_facts import read_facts
from cache_server.index.runs import RunRepository
from cache_server.index.tombstones import prune_tombstones, tombstones_of
from cache_server.runs.ingest import record_run
from cache_server.settings import Settings
from tests.support.entry_records import record

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)


class Runs(RunRepository):
    """The repository, with the service's rules of storing a report (:func:`record_run`)."""

    def record(self, run: RunInfo, misses: list[MissRecord], *, now: dt.datetime) -> RunRecorded:
        return record_run(self, run, misses, now=now)


def run(run_id: str, namespace: str = "ns", *, token: str | None = "tok", **numbers: int) -> RunInfo:
    return RunInfo(
        run_id=run_id,
        namespace=namespace,
        framework="jax",
        host="h",
        process_index=0,
        reported_by=token,
        started_at=T0,
        updated_at=T0,
        ended_at=None,
        numbers=RunNumbers(**numbers),
    )


def miss(key: str, module: str | None = "m", components: dict[str, str] | None = None) -> MissRecord:
    return MissRecord(key=key, module=module, components=components, compile_ms=5, load_failed=False)


def test_reports_merge_by_max_and_keep_their_owner(database: Database) -> None:
    runs = Runs(database)
    first = runs.record(run("r1", hits=10, misses=2), [miss("a"), miss("b")], now=T0)
    assert first.before is None and first.misses_kept == 2
    late = runs.record(run("r1", hits=3, misses=5), [miss("b"), miss("c")], now=T0 + dt.timedelta(minutes=1))
    assert late.before == RunNumbers(hits=10, misses=2)
    assert (late.run.numbers.hits, late.run.numbers.misses, late.misses_kept) == (10, 5, 1)
    with pytest.raises(RunOwned):
        runs.record(run("r1", token="other", hits=99), [miss("z")], now=T0)
    with pytest.raises(RunConflict):
        runs.record(run("r1", namespace="elsewhere", hits=99), [miss("z")], now=T0)
    stored = runs.get_run("r1")
    assert stored is not None and stored.numbers.hits == 10 and stored.misses_stored == 3
    assert [m.key for m in runs.misses_of("r1")] == ["a", "b", "c"]  # the order reported
    assert runs.misses_of("r1")[0].components is None


def test_listing_filters_and_patterns(database: Database) -> None:
    runs = Runs(database)
    for index, (run_id, namespace) in enumerate([("r1", "team_a-1"), ("r2", "teamXa-1"), ("r3", "other")]):
        info = run(run_id, namespace)
        runs.record(RunInfo(**{**info.__dict__, "started_at": T0 + dt.timedelta(hours=index)}), [], now=T0)

    def ids(**query: object) -> list[str]:
        return [r.run_id for r in runs.list_runs(RunFilter(**query))]  # type: ignore[arg-type]

    assert ids() == ["r3", "r2", "r1"]
    assert ids(patterns=("team_a-*",)) == ["r1"]  # "_" is itself
    assert ids(patterns=("team?a-*", "oth*")) == ["r3", "r2", "r1"]
    assert ids(since=T0 + dt.timedelta(hours=1), until=T0 + dt.timedelta(hours=2)) == ["r2"]
    assert ids(namespace="other", framework="jax", host="h") == ["r3"]
    assert ids(limit=1) == ["r3"]
    # the ends of the range a route hands over for times past them (9999-12-31 at -14:00, ...)
    last, first = (end.replace(tzinfo=dt.timezone.utc) for end in (dt.datetime.max, dt.datetime.min))
    assert ids(since=last) == [] and ids(until=first) == []
    assert ids(since=first, until=last) == ["r3", "r2", "r1"]


def test_a_prefix_matches_exactly_among_the_runs_the_patterns_cover(database: Database) -> None:
    runs = Runs(database)
    ids = ["abcd-0001", "ABCD-0002", "ab_d-0003", "abXd-0004", "ab%d-0005", "ab*d-0006", "ab[d-0007"]
    for run_id in ids:
        runs.record(run(run_id, "team-b" if run_id.endswith("1") else "team-a"), [], now=T0)

    def starting(prefix: str, patterns: tuple[str, ...] | None = None, limit: int = 11) -> list[str]:
        return [i for i, _ in runs.run_ids_starting(prefix, patterns=patterns, limit=limit)]

    assert starting("abcd") == ["abcd-0001"]  # not ABCD-0002 (SQLite's LIKE ignored case)
    assert starting("ABCD") == ["ABCD-0002"]
    for special in ("ab_", "ab%", "ab*", "ab["):  # each character is itself, no wildcard
        assert starting(special) == [i for i in ids if i.startswith(special)], special
    lower = {i for i in ids if i.startswith("ab")}
    assert len(starting("ab", limit=3)) == 3 and set(starting("ab", limit=6)) == lower
    assert set(starting("ab", patterns=("team-a",), limit=6)) == lower - {"abcd-0001"}  # the limit: visible
    assert starting("abcd", patterns=("team-a",)) == []


def test_runs_and_tombstones_pruned_by_age_and_count(database: Database, db_settings: Settings) -> None:
    runs = Runs(database)
    for day in range(5):
        runs.record(run(f"run-{day}"), [miss(f"k{day}")], now=T0 + dt.timedelta(days=day))
    entries, admin = EntryRepository(database), AdminRepository(database)
    entries.record_new_entries([record("ns", f"e{i}", 10) for i in range(5)])
    for day in range(5):
        admin.delete_entries([("ns", f"e{day}")], policy="lru", when=T0 + dt.timedelta(days=day))

    settings = db_settings.model_copy(
        update={"run_retention_days": 2.5, "max_runs": 2, "tombstone_days": 1.5, "max_tombstones": 10}
    )
    pruned = prune_history(database, settings, T0 + dt.timedelta(days=4))
    # runs: days 0 and 1 are older than 2.5 days; of days 2..4 the newest two are kept
    assert {r.run_id for r in runs.list_runs(RunFilter())} == {"run-3", "run-4"}
    assert pruned.runs == 3
    assert runs.misses_of("run-0") == []  # misses go with their run
    assert set(tombstones_of(database, "ns", [f"e{i}" for i in range(5)])) == {"e3", "e4"}
    assert pruned.tombstones == 3
    assert prune_tombstones(database, older_than=T0, keep=1) == 1
    assert set(tombstones_of(database, "ns", ["e3", "e4"])) == {"e4"}


def test_a_thousand_tombstones_of_one_instant_are_pruned_to_the_bound_not_to_none(database: Database) -> None:
    """Deleting a namespace writes one tombstone per entry, all at one instant (the third probe: 1,000 of
    them, then a prune to 100 kept none): the newest ``keep`` stay, by a stable order."""
    entries, admin = EntryRepository(database), AdminRepository(database)
    keys = [f"e{i:04d}" for i in range(1000)]
    entries.record_new_entries([record("ns", key, 10) for key in keys])
    admin.delete_entries([("ns", key) for key in keys], policy="namespace_deleted", when=T0)
    assert prune_tombstones(database, older_than=T0 - dt.timedelta(days=1), keep=100) == 900
    kept = set(tombstones_of(database, "ns", keys))
    assert kept == set(keys[-100:])  # one instant: the last 100 by (namespace, key), descending
    assert prune_tombstones(database, older_than=T0 - dt.timedelta(days=1), keep=100) == 0  # stable


def test_a_removal_renews_the_tombstone_and_facts_read_it(database: Database) -> None:
    entries, admin = EntryRepository(database), AdminRepository(database)
    graphs = GraphRepository(database)
    entries.record_new_entries([record("ns", "k", 10), record("ns", "v1", 10), record("ns", "v2", 10)])
    graphs.record_graphs(
        [
            GraphRecord("ns", "v1", "mod", "s1", "(f32[2]) -> (f32[2])"),
            GraphRecord("ns", "v2", "mod", "s2", "(f32[4]) -> (f32[4])"),
        ]
    )
    admin.delete_entries([("ns", "k")], policy="max_age", when=T0)
    entries.record_new_entries([record("ns", "k", 10)])
    entries.delete_entry("ns", "k", policy="damaged", when=T0 + dt.timedelta(hours=1))
    (stone,) = tombstones_of(database, "ns", ["k"]).values()
    assert (stone.policy, stone.removed_at, stone.size) == ("damaged", T0 + dt.timedelta(hours=1), 10)

    Runs(database).record(run("r1"), [miss("x1", "mod", {"computation": "c1"})], now=utcnow())
    facts = read_facts(database, "ns", ["v1", "k"], ["mod"])
    assert set(facts.own) == {"v1"} and facts.own["v1"].shapes == "(f32[2]) -> (f32[2])"
    assert sorted(g.key for g in facts.variants["mod"]) == ["v1", "v2"]
    assert [m.components for m in facts.component_misses["mod"]] == [{"computation": "c1"}]
    assert set(facts.tombstones) == {"k"}
