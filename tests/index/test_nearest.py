"""Nearest namespaces: the bounded candidate query and the ranking over it, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from cache_server.auth.tokens import Principal, Role
from cache_server.domain import utcnow
from cache_server.errors import InvalidName, NamespaceNotFound
from cache_server.index import Database, EntryRepository
from cache_server.index.namespaces import NamespaceRepository
from cache_server.index.nearest import NearestRepository
from cache_server.service.nearest import NearestNamespaces
from tests.support.entry_records import record

FAST = {"--xla_cpu_enable_fast_math": "true"}
BASE: dict[str, Any] = {
    "schema": 1,
    "framework": "jax",
    "jax_version": "0.10.2",
    "platform": "cpu",
    "device_count": 1,
    "xla_flags_digest": None,
    "xla_flags": {},
}


def _add(database: Database, name: str, fp: dict[str, Any], count: int, used: dt.datetime) -> None:
    namespaces = NamespaceRepository(database)
    namespaces.upsert_namespace(name, fp, {}, now=used)
    if count:
        EntryRepository(database).record_new_entries([record(name, f"k{i}", 10) for i in range(count)])
    namespaces.upsert_namespace(name, fp, {}, now=used)  # keep the last use given


def test_nearest_ranks_by_fields_then_entries_then_use_and_resolves_flags(database: Database) -> None:
    now = utcnow()
    ours = {**BASE, "xla_flags_digest": "d-fast", "xla_flags": FAST}
    _add(database, "ours", ours, 0, now)
    _add(database, "plain-small", BASE, 3, now - dt.timedelta(minutes=1))
    _add(database, "plain-big", BASE, 5, now - dt.timedelta(hours=1))
    _add(database, "plain-big-old", BASE, 5, now - dt.timedelta(days=2))
    _add(database, "two-fields", {**BASE, "device_count": 4}, 9, now)
    _add(database, "empty", BASE, 0, now)  # nothing stored: never named
    _add(database, "torch", {**BASE, "framework": "torch_xla"}, 50, now)  # another framework
    service = NearestNamespaces(NamespaceRepository(database), NearestRepository(database), candidates=200)

    answer = service.nearest("ours", limit=10)
    assert (answer.namespace, answer.entries) == ("ours", 0)
    ranked = ["plain-big", "plain-big-old", "plain-small", "two-fields"]
    assert [n.namespace for n in answer.nearest] == ranked
    first = answer.nearest[0]
    assert (first.entries, first.differing_fields) == (5, 1)
    assert [d.as_dict() for d in first.differences] == [
        {
            "field": "XLA_FLAGS",
            "ours": "--xla_cpu_enable_fast_math=true",
            "theirs": None,
            "text": "--xla_cpu_enable_fast_math=true (theirs: unset)",
        }
    ]
    last = answer.nearest[-1]
    assert last.differing_fields == 2
    assert [(d.field, d.ours, d.theirs) for d in last.differences] == [
        ("device_count", 1, 4),  # in the order of the fingerprint's fields
        ("XLA_FLAGS", "--xla_cpu_enable_fast_math=true", None),
    ]
    assert len(service.nearest("ours").nearest) == 3  # the default limit

    # a fingerprint sent instead of the stored one; a namespace never registered has 0 entries
    sent = service.nearest("new-one", {**BASE, "device_count": 4}, limit=1)
    assert (sent.entries, [n.namespace for n in sent.nearest]) == (0, ["two-fields"])
    assert sent.nearest[0].differences == []  # the same fingerprint: nothing differs

    # the bound: only the most recently used candidates are compared
    bounded = NearestNamespaces(NamespaceRepository(database), NearestRepository(database), candidates=2)
    assert {n.namespace for n in bounded.nearest("ours", limit=10).nearest} == {"plain-small", "two-fields"}

    with pytest.raises(NamespaceNotFound):
        service.nearest("never")
    with pytest.raises(InvalidName):
        service.nearest("../etc")


def test_a_scoped_token_learns_only_namespaces_it_reaches(database: Database) -> None:
    now = utcnow()
    _add(database, "team_a-ours", {**BASE, "device_count": 2}, 0, now)
    _add(database, "team_a-near", {**BASE, "device_count": 3}, 1, now)
    _add(database, "teamXa-lookalike", BASE, 7, now)  # LIKE's "_" would match it: the check is exact
    _add(database, "TEAM_A-upper", BASE, 7, now)  # SQLite's LIKE ignores case: the check does not
    _add(database, "team_b-secret", BASE, 7, now)
    service = NearestNamespaces(NamespaceRepository(database), NearestRepository(database), candidates=200)
    scoped = Principal("t1", "reader", Role.READ, namespaces=("team_a-*",))
    answer = service.nearest("team_a-ours", principal=scoped, limit=10)
    assert [n.namespace for n in answer.nearest] == ["team_a-near"]
    unscoped = service.nearest("team_a-ours", limit=10)
    assert {n.namespace for n in unscoped.nearest} == {
        "team_a-near",
        "teamXa-lookalike",
        "TEAM_A-upper",
        "team_b-secret",
    }


def test_a_tokens_patterns_filter_before_the_candidate_limit_exactly_as_its_check(database: Database) -> None:
    """The third probe: a token with ``team-a-?`` got no nearest namespace although ``team-a-2`` matches
    it, and 25 namespaces differing only in case (``TEAM-A-xx``), used more recently, filled the candidate
    limit so the token's own were not found. The patterns now filter in SQL exactly as the token's check
    (``?`` one character, case-sensitive), before the limit."""
    now = utcnow()
    _add(database, "team-a-1", {**BASE, "device_count": 2}, 0, now - dt.timedelta(hours=2))
    _add(database, "team-a-2", {**BASE, "device_count": 3}, 1, now - dt.timedelta(hours=1))
    for i in range(25):
        _add(database, f"TEAM-A-{i:02d}", BASE, 1, now - dt.timedelta(minutes=i))
    service = NearestNamespaces(NamespaceRepository(database), NearestRepository(database), candidates=20)
    for patterns in (("team-a-?",), ("team-a-*",)):
        scoped = Principal("t1", "reader", Role.READ, namespaces=patterns)
        answer = service.nearest("team-a-1", principal=scoped, limit=10)
        assert [n.namespace for n in answer.nearest] == ["team-a-2"], patterns
