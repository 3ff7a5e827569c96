"""Admin test fixtures: an app with auth on, real torch_xla entries, upload and metrics helpers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from cache_protocol import SHA256_HEADER
from cache_server.app import create_app
from cache_server.auth import Role
from cache_server.migrate import upgrade
from cache_server.settings import Settings
from cache_server.wiring import Services
from tests.support.api import sha

FIXTURES = Path(__file__).parent / "fixtures" / "torch_xla_2.7_cpu"


def real_entries() -> dict[str, bytes]:
    """Four real torch_xla 2.7 CPU entries: three shape variants of one graph and one other graph."""
    return {path.name: path.read_bytes() for path in sorted(FIXTURES.iterdir())}


def upload(client: TestClient, namespace: str, key: str, data: bytes, **headers: str) -> int:
    response = client.put(
        f"/v1/namespaces/{namespace}/entries/{key}",
        content=data,
        headers={SHA256_HEADER: sha(data), **headers},
    )
    assert response.status_code in (200, 201), response.text
    return response.status_code


def services_of(client: TestClient) -> Services:
    """The services behind a test client's app."""
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return services


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def metric_samples(text: str) -> Samples:
    """Every sample of a Prometheus scrape, by name and sorted labels."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@pytest.fixture
def auth_settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0, auth=True)


@pytest.fixture
def auth_client(auth_settings: Settings) -> Iterator[TestClient]:
    upgrade(auth_settings)
    with TestClient(create_app(auth_settings)) as test_client:
        yield test_client


@pytest.fixture
def tokens(auth_client: TestClient) -> dict[str, str]:
    """One token per role, plus one that is revoked (it had the admin role)."""
    manager = services_of(auth_client).tokens
    made = {role.label: manager.create(f"user-{role.label}", role)[0] for role in Role}
    made["revoked"] = manager.create("former-admin", Role.ADMIN)[0]
    manager.revoke("former-admin")
    return made
