"""Signing from a shell, against a real server process: ``xla-cache keys create`` and ``keys show``, a push
signed with ``XLA_CACHE_SIGNING_KEY``, a namespace that requires signatures (the server's settings from its
environment), and the answers to a leaked key and to old unsigned entries: ``signers``, ``stats``,
``unsigned --remove`` and ``purge-signer``."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cache_protocol.signing import Signer
from tests.support.api import put_ok
from tests.support.cli import run_cli
from tests.support.real_entries import FIXTURES, real_entries
from tests.support.server import LiveServer, run_server
from xla_cache.cli import main as cli_main


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("keys")


@pytest.fixture(scope="module")
def alice(keys: Path) -> Signer:
    """The CI job's key, made with ``xla-cache keys create`` (its public half given to the server)."""
    assert cli_main(["keys", "create", str(keys / "alice.key")]) == 0
    return Signer.from_text((keys / "alice.key").read_text())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, keys: Path, alice: Signer) -> Iterator[LiveServer]:
    env = {
        "XLA_CACHE_SIGNER_KEYS": str(keys / "alice.key.pub"),
        "XLA_CACHE_REQUIRE_SIGNATURES": json.dumps({"locked-*": ["*"]}),
    }
    with run_server(tmp_path_factory.mktemp("signers"), env) as srv:
        yield srv


def test_keys_create_writes_a_private_key_only_its_owner_reads(
    keys: Path, alice: Signer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert stat.S_IMODE((keys / "alice.key").stat().st_mode) == 0o600
    code, out, _ = run_cli(["keys", "show", str(keys / "alice.key.pub")], capsys)
    assert (code, out.split()) == (0, [alice.key_id, alice.public_text()])
    code, out, _ = run_cli(["keys", "show", alice.private_text()], capsys)  # the key itself, as in the env
    assert out.split() == [alice.key_id, alice.public_text()]
    assert cli_main(["keys", "create", str(keys / "alice.key")]) == 2  # never over a key without --force


def test_signed_pushes_unsigned_entries_and_purges(
    server: LiveServer,
    keys: Path,
    alice: Signer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = ["--server", server.url]
    push = ["push", "--import", str(FIXTURES), *url, "--json"]
    code, out, _ = run_cli([*push, "--namespace", "locked-a"], capsys)  # no key: the namespace refuses all
    assert code == 1 and "requires entries signed" in out
    monkeypatch.setenv("XLA_CACHE_SIGNING_KEY", str(keys / "alice.key"))
    code, out, _ = run_cli([*push, "--namespace", "locked-a"], capsys)
    assert code == 0, out
    assert json.loads(out)["namespaces"][0]["uploaded"] == len(real_entries())
    with httpx.Client(base_url=server.url) as http:
        for i in range(3):  # old entries from before signing
            put_ok(http, "old-ns", f"k{i}", bytes([i]) * 100)

    code, out, _ = run_cli(["signers", *url, "--json"], capsys)
    assert json.loads(out)["signers"] == [
        {"signer": alice.key_id, "entries": 4, "bytes": sum(map(len, real_entries().values()))},
        {"signer": None, "entries": 3, "bytes": 300},
    ]
    code, out, _ = run_cli(["stats", "--all", *url], capsys)
    assert "unsigned                   3 entries" in out
    code, out, _ = run_cli(["unsigned", *url], capsys)
    assert out.strip() == "unsigned  3 entries, 300 B"
    monkeypatch.setattr("xla_cache.cli.common.REMOVAL_ROUND", 2)  # calls of 2 entries until none remain
    code, out, err = run_cli(["unsigned", "--remove", *url], capsys)
    assert (code, out.strip()) == (0, "removed 3 entries, freed 300 B")
    assert err.splitlines() == ["removed 2 entries, 1 remaining", "removed 3 entries, 0 remaining"]

    code, out, _ = run_cli(["purge-signer", alice.key_id, "--dry-run", *url], capsys)
    assert "would remove 4 entries" in out
    code, out, _ = run_cli(["purge-signer", alice.key_id, *url], capsys)
    assert "removed 4 entries" in out
    code, out, _ = run_cli(["signers", *url, "--json"], capsys)
    assert json.loads(out)["signers"] == []
    code, _, err = run_cli(["purge-signer", "not-a-key", *url], capsys)
    assert code == 2 and "not a key id" in err
