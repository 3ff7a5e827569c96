"""``xla-cache stats | head``: a reader that stops early ends any command quietly, with no traceback
(issue 42, item 9), whichever subcommand wrote. The real console script, its stdout a pipe whose reader has
already gone."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import XLA_CACHE_BIN, xla_cache_env
from tests.support.server import LiveServer, run_server
from xla_cache.cli import READER_GONE

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with run_server(tmp_path_factory.mktemp("server")) as live:
        yield live


def into_closed_pipe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``xla-cache ARGS | (a reader that closed before anything came)``: the pipe's read end is closed
    before the command starts, so its first write finds no reader, however fast it is."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [str(XLA_CACHE_BIN), *args],
            env=xla_cache_env(env or {}),
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [["config"], ["config", "--json"]])
def test_a_reader_that_stops_early_ends_the_command_quietly(args: list[str]) -> None:
    done = into_closed_pipe(*args)
    assert done.stderr == b""
    assert done.returncode == READER_GONE


def test_stats_into_a_reader_that_stops_early(server: LiveServer, tmp_path: Path) -> None:
    for args in (["stats"], ["stats", "--json"], ["runs"]):
        done = into_closed_pipe(*args, "--server", server.url, env={"XLA_CACHE_DIR": str(tmp_path)})
        assert done.stderr == b"", done.stderr.decode()
        assert done.returncode == READER_GONE


def test_a_reader_that_reads_it_all_sees_the_whole_output(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(XLA_CACHE_BIN), "config"],
        env=xla_cache_env({"XLA_CACHE_DIR": str(tmp_path)}),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == b""
    assert done.stdout.decode().startswith("config file")
