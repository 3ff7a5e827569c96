"""How a download is split into bundle streams and single GETs."""

from __future__ import annotations

from xla_cache.http.api import MAX_KEYS_PER_REQUEST, RemoteEntry
from xla_cache.transfer.download import BUNDLE_MIN_ENTRIES, _plan


def entries(count: int, size: int, first: int = 0) -> list[RemoteEntry]:
    return [RemoteEntry(str(first + i), size, "0" * 64) for i in range(count)]


def test_few_small_entries_make_one_bundle() -> None:
    jobs = _plan(entries(BUNDLE_MIN_ENTRIES, 100), large_entry_bytes=10_000, streams=4)
    assert [len(job) for job in jobs] == [BUNDLE_MIN_ENTRIES]


def test_many_small_entries_are_spread_over_the_streams() -> None:
    jobs = _plan(entries(2000, 100), large_entry_bytes=10_000, streams=4)
    assert len(jobs) == 4
    assert sorted(len(job) for job in jobs) == [500, 500, 500, 500]


def test_large_entries_are_single_gets_and_no_entry_is_lost() -> None:
    needed = entries(3, 50_000) + entries(600, 100, first=1000)
    jobs = _plan(needed, large_entry_bytes=10_000, streams=4)
    singles = [job for job in jobs if len(job) == 1 and job[0].size >= 10_000]
    assert len(singles) == 3
    assert sorted(e.key for job in jobs for e in job) == sorted(e.key for e in needed)


def test_no_bundle_exceeds_the_keys_of_one_request() -> None:
    jobs = _plan(entries(3 * MAX_KEYS_PER_REQUEST, 1), large_entry_bytes=10_000, streams=1)
    assert max(len(job) for job in jobs) <= MAX_KEYS_PER_REQUEST
    assert sum(len(job) for job in jobs) == 3 * MAX_KEYS_PER_REQUEST


def test_entries_of_one_pack_share_a_bundle() -> None:
    """The manifest lists entries by use, their packs interleaved; each bundle should read few packs."""
    packs = [f"{p:032x}" for p in range(4)]
    needed = [RemoteEntry(f"k{i}", 100, "0" * 64, packs[i % 4]) for i in range(2000)]
    needed[7] = RemoteEntry("loose", 100, "0" * 64)  # stored without a pack: after the packs seen before it
    jobs = _plan(needed, large_entry_bytes=10_000, streams=4)
    assert len(jobs) == 4
    assert [len({e.pack for e in job}) for job in jobs] == [1, 1, 1, 2]
    assert [e.key for e in jobs[0][:3]] == ["k0", "k4", "k8"]  # the first pack's, in manifest order
    assert jobs[-1][-1].key == "loose"
    assert sorted(e.key for job in jobs for e in job) == sorted(e.key for e in needed)
