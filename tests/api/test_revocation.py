"""A token revoked between a group's commit and the check after it (cache_server.auth.revocation): the upload
takes back the rows and blobs it just wrote, announces none of them, and ends with ``token_revoked``. The
purge-mid-stream case against a real server is tests/reliability/test_purge_in_flight.py; this is the
narrower window, which only an injected answer to "still allowed?" hits every time."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cache_protocol.tar import END, TarReader
from cache_server.errors import StorageUnavailable, TokenRevoked
from cache_server.service.bulk import GROUP_ENTRIES
from cache_server.settings import Settings
from cache_server.wiring import Services
from tests.support.api import sha, stream_member

NS = "team-a"


def answers(*allowed: bool) -> tuple[Callable[[], bool], list[bool]]:
    """A "still allowed?" that gives these answers in turn (then the last again), and the answers given."""
    given: list[bool] = []

    def still_allowed() -> bool:
        given.append(allowed[min(len(given), len(allowed) - 1)])
        return given[-1]

    return still_allowed, given


def stream(count: int) -> TarReader:
    parts = []
    for index in range(count):
        data = b"entry %d" % index
        parts.append(stream_member(f"k{index}", data))
    pieces = iter([b"".join(parts) + END])
    return TarReader(lambda _size: next(pieces, b""))


def blob_files(settings: Settings) -> list[str]:
    return sorted(p.name for p in (settings.data_dir / "blobs" / NS).glob("k*"))


def test_a_bulk_group_written_after_the_revoke_is_taken_back_unannounced(
    services: Services, settings: Settings
) -> None:
    cache = services.cache
    cursor = cache.feed_head()
    still_allowed, given = answers(True, False)  # active before the commit, revoked right after it
    with pytest.raises(TokenRevoked) as raised:
        cache.put_entries(NS, stream(5).members(), stored_by="tok", still_allowed=still_allowed)
    assert given == [True, False]
    assert "revoked while the upload was in flight" in raised.value.detail
    assert cache.manifest(NS) == [] and blob_files(settings) == []
    assert cache.feed(NS, cursor, 100) == []  # never announced to followers


def test_a_put_whose_row_is_written_after_the_revoke_is_taken_back(
    services: Services, settings: Settings
) -> None:
    data = b"late entry"
    still_allowed, given = answers(False)
    with pytest.raises(TokenRevoked):
        services.cache.put_entry(
            NS,
            "k1",
            [data],
            sha256=sha(data),
            stored_by="tok",
            still_allowed=still_allowed,
        )
    assert given == [False]
    assert services.cache.manifest(NS) == [] and blob_files(settings) == []


def test_an_active_token_is_asked_twice_per_group_and_stores_everything(
    services: Services, settings: Settings
) -> None:
    still_allowed, given = answers(True)
    result = services.cache.put_entries(NS, stream(5).members(), stored_by="tok", still_allowed=still_allowed)
    assert result.stored == 5 and len(services.cache.manifest(NS)) == 5
    assert len(blob_files(settings)) == 5  # where the other tests find none
    assert given == [True, True]  # before and after the one group's commit: not a read per member


def test_a_token_revoked_before_a_group_commits_stores_nothing_of_it(
    services: Services, settings: Settings
) -> None:
    still_allowed, given = answers(False)
    with pytest.raises(TokenRevoked):
        services.cache.put_entries(NS, stream(5).members(), stored_by="tok", still_allowed=still_allowed)
    assert given == [False]  # asked before the commit; nothing was written to take back
    assert services.cache.manifest(NS) == [] and blob_files(settings) == []
    assert list((settings.data_dir / "blobs" / ".tmp").iterdir()) == []  # the group's temp files are gone too


def test_a_revoke_seen_after_a_group_commits_stores_nothing_of_the_group_read_meanwhile(
    services: Services, settings: Settings
) -> None:
    """The first group commits while the second is read (service/bulk.py): revoked right after the first
    group's rows are written, the upload takes them back and ends as it did when the stream waited for the
    commit: the second group is not committed, nor asked about, and leaves no blob or temp file."""
    still_allowed, given = answers(True, False)
    with pytest.raises(TokenRevoked):
        services.cache.put_entries(
            NS, stream(GROUP_ENTRIES + 40).members(), stored_by="tok", still_allowed=still_allowed
        )
    assert given == [True, False]
    assert services.cache.manifest(NS) == [] and blob_files(settings) == []
    assert list((settings.data_dir / "blobs" / ".tmp").iterdir()) == []


def test_a_group_whose_check_fails_ends_the_upload_with_its_error_and_nothing_of_the_next(
    services: Services, settings: Settings
) -> None:
    """The check after the first group's rows fails (the index unreachable) while the second group is read:
    the upload ends with that error, as when the stream waited for the commit; the first group's rows stay
    (written before the check), nothing of the second is stored."""
    given: list[str] = []

    def still_allowed() -> bool:
        given.append("asked")
        if len(given) == 2:
            raise StorageUnavailable("The index cannot be reached.")
        return True

    with pytest.raises(StorageUnavailable):
        services.cache.put_entries(
            NS, stream(GROUP_ENTRIES + 40).members(), stored_by="tok", still_allowed=still_allowed
        )
    assert len(given) == 2  # the second group was never committed
    first = {f"k{i}" for i in range(GROUP_ENTRIES)}
    assert {entry.key for entry in services.cache.manifest(NS)} == first
    assert set(blob_files(settings)) == first
    assert list((settings.data_dir / "blobs" / ".tmp").iterdir()) == []
