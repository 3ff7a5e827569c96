"""Fail open with real torch_xla jobs: a server that is down, hangs, answers 5xx or sends a corrupt bundle
costs the job at most the timeout and one warning naming why, and training goes on with the local cache."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_server import FakeCacheServer
from tests.support.server import LiveServer, run_server
from tests.support.torch_xla_jobs import JobResult, run_job
from xla_cache.http.api import CacheApi
from xla_cache.http.deadline import Deadline

pytestmark = pytest.mark.e2e

TIMEOUT = 3.0
SLACK = 2.0  # thread start-up on a loaded 2-core machine
SHAPES = 3


@pytest.fixture
def fake_with_real_entries(
    live_server: LiveServer,
    first_job: tuple[JobResult, Path],
) -> Iterator[FakeCacheServer]:
    """A fake server holding the real entries of job 1's namespace (so the corrupt case has real data)."""
    namespace = first_job[0].warm["namespace"]
    api = CacheApi(live_server.url)
    with FakeCacheServer() as fake:
        for entry in api.manifest(namespace, Deadline(30)).entries:
            with api.entry(namespace, entry.key, Deadline(30)) as (_, chunks):
                fake.put(namespace, entry.key, b"".join(chunks))
        api.close()
        yield fake


@pytest.mark.parametrize(
    ("failure", "named"),
    [
        ("down", "cannot connect"),
        ("hang", "did not"),
        ("5xx", "HTTP 503"),
        ("corrupt bundle", "SHA-256"),
    ],
)
def test_job_fails_open(
    failure: str,
    named: str,
    fake_with_real_entries: FakeCacheServer,
    first_job: tuple[JobResult, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake = fake_with_real_entries
    url = fake.url
    if failure == "down":
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    elif failure == "hang":
        fake.hang = True
    elif failure == "5xx":
        fake.fail_status = 503
    else:
        fake.corrupt_bundle = True

    job = run_job(
        ["--server", url, "--cache-dir", str(tmp_path), "--shapes", str(SHAPES), "--timeout", str(TIMEOUT)]
    )

    assert job.data["digests"] == first_job[0].data["digests"][:SHAPES]  # training went on, same results
    assert job.counters["UncachedCompile"] == SHAPES  # with the local cache only
    assert job.warm["server_seconds"] < TIMEOUT + SLACK
    assert job.data["upload"]["seconds"] < TIMEOUT + SLACK
    warnings = job.cache_warnings()
    assert len(warnings) == 1, warnings
    assert named in warnings[0]
    assert [p.name for p in Path(job.warm["cache_dir"]).iterdir() if p.name.endswith(".part")] == []
    with capsys.disabled():
        print(
            f"\n[measured] {failure}: warm cost {job.warm['server_seconds']:.2f} s with the server "
            f"(timeout {TIMEOUT:g} s), flush {job.data['upload']['seconds']:.2f} s"
        )


def test_a_wrong_token_costs_one_warning(tmp_path: Path) -> None:
    """The server refuses the token on the warm's first request, and again on every upload and run report:
    the job hears of it once, from the warm (not as compiles the server refused, nor once per part)."""
    with run_server(tmp_path / "server", {"XLA_CACHE_AUTH": "true"}) as server:
        job = run_job(
            ["--server", server.url, "--cache-dir", str(tmp_path / "cache"), "--shapes", "2"],
            {"XLA_CACHE_TOKEN": "xlc_not_a_token_of_this_server"},
        )
    warnings = job.cache_warnings()
    assert len(warnings) == 1, warnings
    assert "HTTP 401 unauthorized" in warnings[0] and "training continues" in warnings[0]
    assert job.counters["UncachedCompile"] == 2
