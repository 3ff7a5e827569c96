"""``xla-cache-server quota set|list``: quotas set on the index the server reads, by namespace or token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cache_server.auth.tokens import Role, TokenManager
from cache_server.cli import main
from cache_server.index import Database, TokenRepository
from cache_server.settings import Settings
from tests.support.migrated import migrated


def test_quota_set_and_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XLA_CACHE_DATA_DIR", str(tmp_path))
    settings = Settings(data_dir=tmp_path)
    migrated(settings)
    database = Database.from_settings(settings)
    token_id = TokenManager(TokenRepository(database)).create("ci", Role.WRITE)[1].id
    database.dispose()

    assert main(["quota", "set", "--namespace", "team", "--max-entries", "2", "--max-bytes", "1000"]) == 0
    assert main(["quota", "set", "--token", "ci", "--max-bytes", "500", "--json"]) == 0
    out = capsys.readouterr().out
    assert "team" in out and json.loads(out[out.index("[") :])[0]["subject"] == token_id
    assert main(["quota", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(q["kind"], q["subject"], q["max_entries"], q["max_bytes"]) for q in listed] == [
        ("namespace", "team", 2, 1000),
        ("token", token_id, None, 500),
    ]
    assert main(["quota", "set", "--token", "nobody", "--max-entries", "1"]) == 1
    assert main(["quota", "set", "--namespace", "team"]) == 2  # no limit given
    assert main(["quota", "set", "--namespace", "bad/name", "--max-entries", "1"]) == 1
    assert "no token has the name" in capsys.readouterr().err
    assert main(["quota", "set", "--namespace", "team", "--clear"]) == 0
    assert main(["quota", "set", "--token", token_id, "--clear"]) == 0
    capsys.readouterr()
    assert main(["quota", "list"]) == 0
    assert "(no quotas" in capsys.readouterr().out
