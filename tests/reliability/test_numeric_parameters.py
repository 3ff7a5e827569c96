"""Every number a request carries is range-checked: walked from the OpenAPI document, every integer and
number query parameter and JSON body field of every operation gets 2^63, -1 and 10^30 (and its largest
allowed value), against a real uvicorn on SQLite and on PostgreSQL. Out of range is the API's validation
answer (400 ``bad_request``), the largest allowed value is answered 200, and nothing is a 5xx.

Found by a hostile client: ``GET .../manifest?max_entries=9223372036854775808`` answered 500 (an integer the
index cannot hold reached it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cache_server.app import create_app
from cache_server.auth.tokens import Role
from cache_server.settings import Settings
from cache_server.wiring import build_services
from tests.support.api import put
from tests.support.databases import fresh_database_url
from tests.support.migrated import migrated
from tests.support.threaded_server import serve_in_thread

OUT_OF_RANGE: tuple[int, ...] = (2**63, -1, 10**30)
PATH_VALUES = {
    "namespace": "bounds",
    "key": "k",
    "token": "probe",
    "signer": "unsigned",
    "run_id": "run-probe-0001",
}


@dataclass(frozen=True)
class Probe:
    """One numeric field of one operation: where it goes and the largest value its schema allows."""

    method: str
    path: str
    where: str  # "query" or "body"
    name: str
    maximum: float | None
    integer: bool
    body_schema: str | None  # the component schema of the body, when ``where`` is "body"
    required: tuple[tuple[str, Any], ...] = ()  # the body's other required fields, with a plain value

    @property
    def label(self) -> str:
        return f"{self.method} {self.path} {self.where}.{self.name}"


def _numeric(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The integer/number branch of a (possibly nullable) schema, or None."""
    for branch in [schema, *schema.get("anyOf", [])]:
        if branch.get("type") in ("integer", "number"):
            return branch
    return None


def _plain(schema: dict[str, Any]) -> Any:
    """A harmless valid value for a required field beside the one probed."""
    numeric = _numeric(schema)
    if numeric is not None:
        return numeric.get("minimum", 0)
    return False if schema.get("type") == "boolean" else "probe"


def _body_ref(operation: dict[str, Any]) -> str | None:
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return None
    schema = content["schema"]
    for branch in [schema, *schema.get("anyOf", [])]:
        if "$ref" in branch:
            ref: str = branch["$ref"]
            return ref.rsplit("/", 1)[1]
    return None


def probes(document: dict[str, Any]) -> list[Probe]:
    """Every numeric query parameter and JSON body field in the document."""
    found: list[Probe] = []
    components = document["components"]["schemas"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                branch = _numeric(parameter["schema"])
                if branch is not None:
                    assert parameter["in"] == "query", parameter
                    found.append(
                        Probe(
                            method,
                            path,
                            "query",
                            parameter["name"],
                            branch.get("maximum"),
                            branch["type"] == "integer",
                            None,
                        )
                    )
            body = _body_ref(operation)
            if body is None:
                continue
            properties = components[body].get("properties", {})
            for name, schema in properties.items():
                branch = _numeric(schema)
                if branch is not None:
                    others = [field for field in components[body].get("required", []) if field != name]
                    found.append(
                        Probe(
                            method,
                            path,
                            "body",
                            name,
                            branch.get("maximum"),
                            branch["type"] == "integer",
                            body,
                            tuple((field, _plain(properties[field])) for field in others),
                        )
                    )
    return found


def send(api: httpx.Client, probe: Probe, value: float) -> httpx.Response:
    url = re.sub(r"\{(\w+)[^}]*\}", lambda m: PATH_VALUES.get(m.group(1), "probe"), probe.path)
    if probe.method == "delete" and probe.path == "/admin/namespaces/{namespace}":
        url = "/admin/namespaces/doomed"  # a namespace's delete removes one of its own, never "bounds"
    query: dict[str, Any] = {}
    if probe.path.endswith("/feed"):
        query = {"after": 0, "wait": 0}  # a long poll answers at once
    elif probe.path.endswith(("/graphs", "/graphs/variants")):
        query = {"namespace": PATH_VALUES["namespace"]}  # the report of one namespace
    if probe.where == "query":
        query[probe.name] = value
        if probe.method == "post" and probe.path.endswith("/nearest"):  # the fingerprint to compare
            return api.request(probe.method, url, params=query, json={"fingerprint": {"framework": "jax"}})
        return api.request(probe.method, url, params=query)
    body: dict[str, Any] = dict(probe.required)
    if probe.path == "/admin/evict":  # a dry run that says what to evict: the probe stays harmless
        body.update(dry_run=True, older_than_seconds=3600)
    elif probe.path.endswith("/purge"):
        body["dry_run"] = True
    elif probe.path == "/v1/runs":  # a valid report around the number probed
        body.update(
            run_id="run-probe-0001", namespace=PATH_VALUES["namespace"], framework="jax", host="probe"
        )
    body[probe.name] = value
    return api.request(probe.method, url, params=query, json=body)


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database_url(request.param, tmp_path) as database_url:
        settings = Settings(
            data_dir=tmp_path / "data", database_url=database_url, access_flush_seconds=60.0, packs=True
        )
        migrated(settings)
        services = build_services(settings)
        services.tokens.create(PATH_VALUES["token"], Role.WRITE)  # for the purge's dry run to find
        with serve_in_thread(create_app(settings, services)) as url:
            yield url


def test_every_numeric_parameter_out_of_range_is_400_and_none_is_a_5xx(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as api:
        stored = put(api, "bounds", "k", b"x")
        assert stored.status_code == 201, stored.text
        assert put(api, "doomed", "k", b"x").status_code == 201  # the delete removes it at its maximum
        found = probes(api.get("/openapi.json").json())
        labels = {probe.label for probe in found}
        # The walk sees the parameters it must (a route that loses its numbers would make it pass vacuously).
        assert {
            "get /v1/namespaces/{namespace}/manifest query.max_entries",
            "get /v1/namespaces/{namespace}/manifest query.max_bytes",
            "get /v1/namespaces/{namespace}/feed query.after",
            "get /admin/stats query.days",
            "post /admin/evict body.max_total_bytes",
        } <= labels, sorted(labels)
        unbounded = [probe.label for probe in found if probe.maximum is None]
        assert unbounded == [], f"numeric fields without an upper bound in the document: {unbounded}"
        # The document's integer bounds are exact (2^63 - 1 written as a float would read 2^63).
        assert all(isinstance(p.maximum, int) for p in found if p.integer), sorted(labels)
        answers: dict[str, list[int]] = {}
        for probe in found:
            statuses = []
            for value in OUT_OF_RANGE:
                response = send(api, probe, value)
                statuses.append(response.status_code)
                assert response.status_code == 400, (probe.label, value, response.text)
                assert response.json()["error"] == "bad_request", (probe.label, value)
            assert probe.maximum is not None
            largest = send(api, probe, probe.maximum)
            statuses.append(largest.status_code)
            assert largest.status_code == 200, (probe.label, probe.maximum, largest.text)
            answers[probe.label] = statuses
        assert api.get("/v1/namespaces/bounds/entries/k").content == b"x"  # nothing lost on the way
    print(f"\n{len(found)} numeric fields, each 2^63, -1, 10^30, then its maximum:")
    for label, statuses in sorted(answers.items()):
        print(f"  {label}: {statuses}")
