"""Who may report and see runs: a write token reports into the namespaces it covers and owns the run ids it
reported first; admin sees every run, a write token limited to namespace patterns only its namespaces'."""

from __future__ import annotations

from fastapi.testclient import TestClient

from cache_server.auth.tokens import Role
from tests.support.api import bearer
from tests.support.apps import services_of
from tests.support.run_reports import run_report


def listed(client: TestClient, token: str) -> list[str]:
    response = client.get("/admin/runs", headers=bearer(token))
    assert response.status_code == 200, response.text
    return sorted(run["run_id"] for run in response.json()["runs"])


def test_reports_need_a_write_token_covering_the_namespace(
    auth_client: TestClient, tokens: dict[str, str]
) -> None:
    manager = services_of(auth_client).tokens
    scoped, _ = manager.create("team-a", Role.WRITE, ["team-a-*"])
    assert (
        auth_client.post("/v1/runs", json=run_report("run-anon-001", namespace="team-a-1")).status_code == 401
    )
    response = auth_client.post(
        "/v1/runs", json=run_report("run-read-001", namespace="team-a-1"), headers=bearer(tokens["read"])
    )
    assert response.status_code == 403
    outside = auth_client.post(
        "/v1/runs", json=run_report("run-out-0001", namespace="team-b-1"), headers=bearer(scoped)
    )
    assert outside.status_code == 403 and outside.json()["error"] == "forbidden"
    assert listed(auth_client, tokens["admin"]) == []  # nothing stored by the refused reports

    assert (
        auth_client.post(
            "/v1/runs", json=run_report("run-a-000001", namespace="team-a-1"), headers=bearer(scoped)
        ).status_code
        == 200
    )
    assert (
        auth_client.post(
            "/v1/runs", json=run_report("run-w-000001", namespace="team-b-1"), headers=bearer(tokens["write"])
        ).status_code
        == 200
    )


def test_the_first_token_to_report_a_run_id_owns_it(auth_client: TestClient, tokens: dict[str, str]) -> None:
    manager = services_of(auth_client).tokens
    other, _ = manager.create("other-writer", Role.WRITE)
    first = auth_client.post(
        "/v1/runs", json=run_report("run-owned-01", namespace="ns-1", hits=5), headers=bearer(tokens["write"])
    )
    assert first.status_code == 200
    forged = auth_client.post(
        "/v1/runs", json=run_report("run-owned-01", namespace="ns-1", hits=999), headers=bearer(other)
    )
    assert forged.status_code == 403 and forged.json()["error"] == "run_owned"
    # even an admin cannot take over another token's run
    taken = auth_client.post(
        "/v1/runs",
        json=run_report("run-owned-01", namespace="ns-1", hits=999),
        headers=bearer(tokens["admin"]),
    )
    assert taken.status_code == 403 and taken.json()["error"] == "run_owned"
    runs = auth_client.get("/admin/runs", headers=bearer(tokens["admin"])).json()["runs"]
    assert [(r["run_id"], r["hits"]) for r in runs] == [("run-owned-01", 5)]
    again = auth_client.post(
        "/v1/runs", json=run_report("run-owned-01", namespace="ns-1", hits=7), headers=bearer(tokens["write"])
    )
    assert again.status_code == 200 and again.json()["hits"] == 7


def test_a_scoped_write_token_sees_only_its_namespaces_runs(
    auth_client: TestClient, tokens: dict[str, str]
) -> None:
    manager = services_of(auth_client).tokens
    team_a, _ = manager.create("team-a", Role.WRITE, ["team-a-*"])
    team_b, _ = manager.create("team-b", Role.WRITE, ["team_b?"])
    auth_client.post(
        "/v1/runs", json=run_report("run-a-000001", namespace="team-a-1"), headers=bearer(team_a)
    )
    auth_client.post("/v1/runs", json=run_report("run-b-000001", namespace="team_b1"), headers=bearer(team_b))
    # "_" in a pattern is itself, not LIKE's any character
    auth_client.post(
        "/v1/runs", json=run_report("run-x-000001", namespace="teamXb1"), headers=bearer(tokens["write"])
    )
    # patterns match case-sensitively, as the token's own check does (SQLite's LIKE would not)
    auth_client.post(
        "/v1/runs", json=run_report("run-c-000001", namespace="TEAM-A-9"), headers=bearer(tokens["write"])
    )

    assert listed(auth_client, tokens["admin"]) == [
        "run-a-000001",
        "run-b-000001",
        "run-c-000001",
        "run-x-000001",
    ]
    assert listed(auth_client, team_a) == ["run-a-000001"]
    assert listed(auth_client, team_b) == ["run-b-000001"]
    assert auth_client.get("/admin/runs/run-a-000001", headers=bearer(team_a)).status_code == 200
    hidden = auth_client.get("/admin/runs/run-b-000001", headers=bearer(team_a))
    assert hidden.status_code == 404  # not even whether it exists
    # role as for stats: an unlimited write token and a read token see no one's runs
    for token in (tokens["write"], tokens["read"]):
        assert auth_client.get("/admin/runs", headers=bearer(token)).status_code == 403
        assert auth_client.get("/admin/runs/run-a-000001", headers=bearer(token)).status_code == 403
