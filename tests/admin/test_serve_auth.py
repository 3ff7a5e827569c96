"""A real ``xla-cache-server``: listening beyond loopback, and tokens made and revoked with its CLI."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.support.server import run_server, server_cli


def test_insecure_flag_allows_a_public_address_with_auth_off(tmp_path: Path) -> None:
    with run_server(tmp_path, host="0.0.0.0", extra_args=["--insecure"]) as server:
        assert httpx.get(f"{server.url}/v1/namespaces/open").status_code == 404  # served, no token asked


def test_auth_on_serves_a_public_address_and_cli_tokens_work(tmp_path: Path) -> None:
    created = server_cli(tmp_path, "token", "create", "--name", "ci", "--role", "write")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("xlc_") and "shown only this once" in created.stderr
    with run_server(tmp_path, {"XLA_CACHE_AUTH": "on"}, host="0.0.0.0") as server:
        url = f"{server.url}/v1/namespaces/team"
        assert httpx.put(url, json={}).status_code == 401
        assert httpx.put(url, json={}, headers={"Authorization": f"Bearer {token}"}).status_code == 201
        listed = json.loads(server_cli(tmp_path, "token", "list", "--json").stdout)
        assert [(t["name"], t["role"], t["revoked_at"]) for t in listed] == [("ci", "write", None)]
        assert listed[0]["last_used_at"] is not None
        assert token not in server_cli(tmp_path, "token", "list").stdout
        revoked = server_cli(tmp_path, "token", "revoke", "ci")
        assert revoked.returncode == 0 and "revoked token 'ci'" in revoked.stdout
        # Revocation takes effect at once, in the running server: tokens are looked up on every request.
        assert httpx.get(url, headers={"Authorization": f"Bearer {token}"}).status_code == 401
        assert token not in server.log()
    again = server_cli(tmp_path, "token", "revoke", "ci")
    assert again.returncode == 1 and "no active token" in again.stderr
