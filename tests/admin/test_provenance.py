"""Scoped write tokens and provenance: which token stored what, and removing all of it in one command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from cache_protocol import UPLOADER_HEADER
from cache_server.app import create_app
from cache_server.auth.tokens import Role
from cache_server.errors import BadRequest
from cache_server.settings import Settings
from cache_server.storage.base import blob_name
from tests.support import api
from tests.support.api import bearer
from tests.support.apps import services_of
from tests.support.migrated import migrated
from tests.support.server import server_cli


def put(client: TestClient, token: str, namespace: str, key: str, data: bytes) -> int:
    """The status of an upload with ``token`` that claims to come from CI."""
    claims = {UPLOADER_HEADER: "claims-to-be-ci", **bearer(token)}
    return api.put(client, namespace, key, data, **claims).status_code


@pytest.fixture
def made(auth_client: TestClient) -> dict[str, str]:
    """An admin, a write token limited to two patterns, an unlimited write token, a limited read token."""
    manager = services_of(auth_client).tokens
    return {
        "admin": manager.create("admin", Role.ADMIN)[0],
        "team-a": manager.create("team-a-ci", Role.WRITE, ["team-a-*", "shared-v?"])[0],
        "anywhere": manager.create("trusted-filler", Role.WRITE)[0],
        "reader-a": manager.create("team-a-jobs", Role.READ, ["team-a-*"])[0],
    }


def test_a_scoped_write_token_reaches_only_matching_namespaces(
    auth_client: TestClient, made: dict[str, str]
) -> None:
    assert put(auth_client, made["team-a"], "team-a-llm", "k1", b"one") == 201
    assert put(auth_client, made["team-a"], "shared-v2", "k1", b"one") == 201
    for namespace in ("team-b-llm", "shared-v10", "xteam-a-llm", "TEAM-A-llm"):
        assert put(auth_client, made["team-a"], namespace, "k1", b"one") == 403, namespace
    refused = auth_client.put("/v1/namespaces/team-b-llm", json={}, headers=bearer(made["team-a"]))
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "The token 'team-a-ci' is limited to namespaces matching shared-v?, team-a-*; "
        "'team-b-llm' is not one of them."
    )
    # Nothing of the refused uploads was stored anywhere.
    store = services_of(auth_client).store
    assert [info.name for info in store.list()] == sorted(
        [blob_name("shared-v2", "k1"), blob_name("team-a-llm", "k1")]
    )


def test_a_scoped_read_token_reads_its_namespaces_and_no_server_wide_view(
    auth_client: TestClient, made: dict[str, str]
) -> None:
    assert put(auth_client, made["anywhere"], "team-a-llm", "k", b"a") == 201
    assert put(auth_client, made["anywhere"], "team-b-llm", "k", b"b") == 201
    reader = bearer(made["reader-a"])
    assert auth_client.get("/v1/namespaces/team-a-llm/entries/k", headers=reader).content == b"a"
    assert auth_client.get("/v1/namespaces/team-b-llm/entries/k", headers=reader).status_code == 403
    assert (
        auth_client.post("/v1/namespaces/team-b-llm/bundle", json={"keys": ["k"]}, headers=reader).status_code
        == 403
    )
    assert put(auth_client, made["reader-a"], "team-a-llm", "k2", b"x") == 403  # the role still applies
    for path in ("/metrics", "/dashboard/data"):  # they name every namespace
        response = auth_client.get(path, headers=reader)
        assert response.status_code == 403, path
        assert "needs a token without that limit" in response.json()["detail"]
    assert auth_client.get("/openapi.json", headers=reader).status_code == 200
    # the dashboard's page holds no data (it is open); what it shows this token is its own namespaces
    assert auth_client.get("/dashboard/me", headers=reader).json()["namespaces"] == ["team-a-llm"]


def test_bad_scopes_are_refused_when_the_token_is_made(auth_client: TestClient) -> None:
    manager = services_of(auth_client).tokens
    for patterns in ([], ["team/a"], ["a" * 129], ["[ab]*"], ["x"] * 40 + [f"y{i}" for i in range(33)]):
        with pytest.raises(BadRequest, match=r"pattern|at least one|at most"):
            manager.create("bad", Role.WRITE, patterns)
    with pytest.raises(BadRequest, match="admin token reaches the whole server"):
        manager.create("bad", Role.ADMIN, ["a*"])
    assert manager.list_tokens() == []


def test_every_entry_records_the_token_that_stored_it(auth_client: TestClient, made: dict[str, str]) -> None:
    assert put(auth_client, made["team-a"], "team-a-llm", "k1", b"one") == 201
    assert put(auth_client, made["anywhere"], "team-a-llm", "k2", b"two!") == 201
    # Uploading the same bytes again is a 200 and does not take the entry over.
    assert put(auth_client, made["anywhere"], "team-a-llm", "k1", b"one") == 200
    services = services_of(auth_client)
    ids = {info.name: info.id for info in services.tokens.list_tokens()}
    entry = services.cache.head_entry("team-a-llm", "k1")
    assert (entry.stored_by, entry.uploader) == (ids["team-a-ci"], "claims-to-be-ci")
    listing = auth_client.get("/admin/tokens", headers=bearer(made["admin"])).json()["tokens"]
    by_name = {u["token"]["name"]: u for u in listing}
    assert (by_name["team-a-ci"]["entries"], by_name["team-a-ci"]["bytes"]) == (1, 3)
    assert (by_name["trusted-filler"]["entries"], by_name["trusted-filler"]["bytes"]) == (1, 4)
    assert by_name["team-a-ci"]["token"]["namespaces"] == ["shared-v?", "team-a-*"]
    assert by_name["admin"]["entries"] == 0
    assert listing[0]["token"]["name"] == "trusted-filler"  # most bytes first
    stats = auth_client.get("/admin/stats", headers=bearer(made["admin"])).json()
    assert {u["token"]["name"]: u["entries"] for u in stats["stored_by"]}["team-a-ci"] == 1


def test_purging_a_leaked_token_revokes_it_and_removes_only_what_it_stored(
    auth_client: TestClient, made: dict[str, str]
) -> None:
    for i in range(7):
        assert put(auth_client, made["team-a"], "team-a-llm", f"bad{i}", b"poison %d" % i) == 201
    assert put(auth_client, made["anywhere"], "team-a-llm", "good", b"trusted") == 201
    admin = bearer(made["admin"])
    services = services_of(auth_client)

    dry = auth_client.post("/admin/tokens/team-a-ci/purge", json={"dry_run": True}, headers=admin).json()
    assert dry["revoked"] == [] and dry["removed"]["dry_run"] is True
    assert dry["removed"]["evicted"] == 7
    assert sorted(k["key"] for k in dry["removed"]["keys"]) == [f"bad{i}" for i in range(7)]
    assert (
        put(auth_client, made["team-a"], "team-a-llm", "bad7", b"poison 7") == 201
    )  # a dry run changes nothing

    done = auth_client.post("/admin/tokens/team-a-ci/purge", headers=admin).json()
    assert [t["name"] for t in done["tokens"]] == ["team-a-ci"] and len(done["revoked"]) == 1
    assert (done["removed"]["evicted"], done["removed"]["dry_run"]) == (8, False)
    assert put(auth_client, made["team-a"], "team-a-llm", "bad9", b"more") == 401  # revoked first
    for i in range(8):
        assert auth_client.get(f"/v1/namespaces/team-a-llm/entries/bad{i}", headers=admin).status_code == 404
    assert auth_client.get("/v1/namespaces/team-a-llm/entries/good", headers=admin).content == b"trusted"
    assert [info.name for info in services.store.list()] == [blob_name("team-a-llm", "good")]
    stats = auth_client.get("/admin/stats", headers=admin).json()
    assert stats["totals"]["evictions"] == 0  # a purge is not an eviction
    assert auth_client.post("/admin/tokens/nobody/purge", headers=admin).json()["error"] == "token_not_found"


def test_a_token_purge_in_rounds_revokes_once_and_says_what_remains(
    auth_client: TestClient, made: dict[str, str]
) -> None:
    for i in range(7):
        assert put(auth_client, made["team-a"], "team-a-llm", f"bad{i}", b"poison %d" % i) == 201
    admin = bearer(made["admin"])
    purge = "/admin/tokens/team-a-ci/purge"
    first = auth_client.post(purge, json={"max_entries": 3}, headers=admin).json()
    assert len(first["revoked"]) == 1
    assert (first["removed"]["evicted"], first["removed"]["remaining"]) == (3, 4)
    assert put(auth_client, made["team-a"], "team-a-llm", "bad9", b"more") == 401  # revoked by the first
    dry = auth_client.post(purge, json={"max_entries": 3, "dry_run": True}, headers=admin).json()
    assert (dry["removed"]["evicted"], dry["removed"]["remaining"]) == (3, 1)  # what would be left
    later = [auth_client.post(purge, json={"max_entries": 3}, headers=admin).json() for _ in range(2)]
    assert [(a["removed"]["evicted"], a["removed"]["remaining"], a["revoked"]) for a in later] == [
        (3, 1, []),
        (1, 0, []),
    ]
    for bad in (0, -1, "3", 2**63):
        refused = auth_client.post(purge, json={"max_entries": bad}, headers=admin)
        assert refused.status_code == 400, (bad, refused.text)


def test_reindex_keeps_who_stored_each_entry(auth_client: TestClient, made: dict[str, str]) -> None:
    assert put(auth_client, made["team-a"], "team-a-llm", "k1", b"one") == 201
    services = services_of(auth_client)
    stored_by = services.cache.head_entry("team-a-llm", "k1").stored_by
    with services.database.transaction() as session:  # the index is lost; the blob stays
        session.execute(text("DELETE FROM entries"))
    assert services.reindexer.run().added == 1
    assert services.cache.head_entry("team-a-llm", "k1").stored_by == stored_by


def test_server_cli_creates_scoped_tokens_lists_them_and_purges(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    made = server_cli(
        data_dir, "token", "create", "--name", "ci", "--role", "write", "--namespace", "team-a-*"
    )
    assert made.returncode == 0, made.stderr
    assert "namespaces team-a-*" in made.stderr
    refused = server_cli(data_dir, "token", "create", "--name", "x", "--role", "admin", "--namespace", "a*")
    assert refused.returncode == 1 and "admin token reaches the whole server" in refused.stderr
    listing = json.loads(server_cli(data_dir, "token", "list", "--json").stdout)
    assert [(t["name"], t["namespaces"]) for t in listing] == [("ci", ["team-a-*"])]
    settings = Settings(data_dir=data_dir, auth=True)
    migrated(settings)
    with TestClient(create_app(settings)) as client:
        for i in range(3):
            assert put(client, made.stdout.strip(), "team-a-x", f"k{i}", b"%d" % i) == 201
    dry = server_cli(data_dir, "token", "purge", "ci", "--dry-run")
    assert dry.returncode == 0 and "would remove 3 entries" in dry.stdout and "active" in dry.stdout
    purged = server_cli(data_dir, "token", "purge", "ci")
    assert purged.returncode == 0, purged.stderr
    assert "revoked now" in purged.stdout and "removed 3 entries (3 bytes)" in purged.stdout
    assert json.loads(server_cli(data_dir, "token", "list", "--json").stdout)[0]["revoked_at"] is not None
    assert server_cli(data_dir, "token", "purge", "nobody").returncode == 1
