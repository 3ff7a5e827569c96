"""Every operation of the OpenAPI document, driven by schemathesis with schema-valid and schema-invalid input,
with auth off and with auth on (an admin token): no answer is a 5xx, and every answer is one the document
declares, with the declared content type, headers and body schema.

The server is a real uvicorn over HTTP, on a bucket (the GCS emulator) with a signing key, so that signed
URLs (``POST .../urls``, ``GET ...?redirect=1``) answer as in production instead of 501. A few entries named
like the first examples Hypothesis draws (``0``, ``A``) make the reads find something. Generation is
derandomized: every run sends the same requests to a server in the same state.
"""

from __future__ import annotations

import io
import tarfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient
from google.oauth2 import service_account
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from cache_protocol import BUNDLE_SHA256_PAX, SHA256_HEADER
from cache_server.api import router
from cache_server.api.access import open_paths
from cache_server.app import create_app
from cache_server.auth.tokens import Role
from cache_server.settings import Settings
from cache_server.storage.gcs import GcsBlobStore
from cache_server.wiring import build_services
from tests.support.api import sha
from tests.support.gcs_keys import key_info
from tests.support.migrated import migrated
from tests.support.threaded_server import serve_in_thread

Operation = schemathesis.APIOperation[Any, Any, Any, Any]
CALL: dict[str, Any] = {"timeout": 30, "allow_redirects": False}  # a 307 is an answer to check, not to follow
EXAMPLES = 20  # per operation and generation mode
LONG_POLL_SECONDS = 1.0
OPEN_PATHS = open_paths(router.routes)  # the routes that declare themselves open: no 401 to probe
# Operations whose schema-invalid bodies may pass (none now: the admin bodies are strict, which
# test_admin_bodies_refuse_what_their_schema_refuses pins).
LAX_BODIES: set[str] = set()
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
# The bulk upload's body is a tar stream: sent as the bytes Hypothesis draws for it (octet-stream's way).
schemathesis.serializer.alias("application/x-tar", "application/octet-stream")
SEEDED = {(namespace, key): f"{namespace}/{key}".encode() * 100 for namespace in ("0", "A") for key in "0A1"}


@dataclass
class Target:
    url: str
    headers: dict[str, str]
    auth: bool


@pytest.fixture(params=["auth off", "auth on"])
def target(
    request: pytest.FixtureRequest, tmp_path: Path, fake_gcs_endpoint: str, gcs_bucket: str
) -> Iterator[Target]:
    auth = request.param == "auth on"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    credentials = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
        key_info(key),
        scopes=["https://www.googleapis.com/auth/devstorage.read_write"],
        always_use_jwt_access=True,  # self-signed tokens: nothing but the emulator is contacted
    )
    settings = Settings(
        data_dir=tmp_path / "data",
        storage_url=f"gs://{gcs_bucket}/cache",
        signed_url_seconds=300,
        auth=auth,
        access_flush_seconds=60.0,
        body_timeout_seconds=5.0,
    )
    migrated(settings)
    store = GcsBlobStore(gcs_bucket, "cache", endpoint=fake_gcs_endpoint, credentials=credentials)
    services = build_services(settings, store=store)
    headers = {}
    if auth:
        token, _ = services.tokens.create("schemathesis", Role.ADMIN)
        headers["Authorization"] = f"Bearer {token}"
    with serve_in_thread(create_app(settings, services)) as url:
        with httpx.Client(base_url=url, headers=headers) as api:
            for (namespace, name), data in SEEDED.items():
                put = api.put(
                    f"/v1/namespaces/{namespace}/entries/{name}",
                    content=data,
                    headers={SHA256_HEADER: sha(data)},
                )
                assert put.status_code == 201, put.text
        yield Target(url, headers, auth)


def destructive(operation: Operation) -> bool:
    """Operations that remove entries run last, so that the reads before them find the seeded ones."""
    return (
        operation.method.upper() == "DELETE"
        or operation.path in ("/admin/evict", "/admin/gc")
        or (operation.path.endswith("/purge"))
    )


def shorten_long_poll(case: schemathesis.Case[Operation]) -> None:
    """A long poll (the change feed's ``wait``) waits at most a second here: its answer is the same kind
    sooner, and the whole run stays bounded (the document allows a minute)."""
    wait = case.query.get("wait") if isinstance(case.query, dict) else None
    if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > LONG_POLL_SECONDS:
        case.query["wait"] = LONG_POLL_SECONDS


def bulk_tar(entries: dict[str, bytes]) -> bytes:
    """A bulk upload's body: one regular file per entry, its digest in a PAX record."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for key, data in entries.items():
            info = tarfile.TarInfo(key)
            info.size = len(data)
            info.pax_headers = {BUNDLE_SHA256_PAX: sha(data)}
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def explicit_cases(operation: Operation) -> list[schemathesis.Case[Operation]]:
    """Requests that random input seldom makes (stored keys, a matching ETag, a valid tar), sent as well: so
    that 200 with bytes, 304, 307, 409 and a bulk upload's answer are checked against the document too."""
    ns, stored = {"namespace": "0"}, {"namespace": "0", "key": "0"}
    data = SEEDED[("0", "0")]
    keys = {"keys": ["0", "A", "1", "absent"]}
    cases: dict[tuple[str, str], list[dict[str, Any]]] = {
        ("GET", "/v1/namespaces/{namespace}/entries/{key}"): [
            {"path_parameters": stored},
            {"path_parameters": stored, "query": {"redirect": True}},
            {"path_parameters": stored, "headers": {"If-None-Match": f'"{sha(data)}"'}},
        ],
        ("HEAD", "/v1/namespaces/{namespace}/entries/{key}"): [{"path_parameters": stored}],
        ("PUT", "/v1/namespaces/{namespace}/entries/{key}"): [
            {"path_parameters": stored, "headers": {SHA256_HEADER: sha(data)}, "body": data},
            {"path_parameters": stored, "headers": {SHA256_HEADER: sha(b"other")}, "body": b"other"},
        ],
        ("POST", "/v1/namespaces/{namespace}/entries"): [
            {
                "path_parameters": ns,
                "body": bulk_tar({"bulk1": b"one", "0": data}),
                "media_type": "application/x-tar",
            }
        ],
        ("POST", "/v1/namespaces/{namespace}/bundle"): [{"path_parameters": ns, "body": keys}],
        ("POST", "/v1/namespaces/{namespace}/urls"): [{"path_parameters": ns, "body": keys}],
        ("POST", "/v1/namespaces/{namespace}/missing"): [{"path_parameters": ns, "body": keys}],
        ("GET", "/v1/namespaces/{namespace}/manifest"): [{"path_parameters": ns}],
        ("GET", "/v1/namespaces/{namespace}"): [{"path_parameters": ns}],
    }
    return [operation.Case(**given) for given in cases.get((operation.method.upper(), operation.path), [])]


@dataclass
class Tally:
    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    by_operation: Counter[str] = field(default_factory=Counter)
    unauthenticated: int = 0
    explicit: int = 0
    failures: list[str] = field(default_factory=list)
    no_negative_input: list[str] = field(default_factory=list)


def run_operation(
    operation: Operation,
    mode: GenerationMode,
    target: Target,
    session: requests.Session,
    tally: Tally,
) -> None:
    rejects_invalid = mode == GenerationMode.NEGATIVE and operation.label not in LAX_BODIES
    checks = CHECKS + ([negative_data_rejection] if rejects_invalid else [])
    probe_without_token = target.auth and operation.path not in OPEN_PATHS

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as found, at once
    )
    def exercise(case: schemathesis.Case[Operation]) -> None:
        nonlocal probe_without_token
        shorten_long_poll(case)
        response = case.call(base_url=target.url, session=session, headers=target.headers, **CALL)
        tally.requests += 1
        tally.statuses[response.status_code] += 1
        tally.by_operation[operation.label] += 1
        case.validate_response(response, checks=checks, headers=target.headers)
        if probe_without_token and mode == GenerationMode.POSITIVE:
            probe_without_token = False  # once per operation: the same request without the token
            anonymous = case.call(base_url=target.url, session=session, **CALL)
            tally.requests += 1
            tally.unauthenticated += 1
            assert anonymous.status_code == 401, f"{operation.label} without a token: {anonymous.status_code}"

    for case in explicit_cases(operation) if mode == GenerationMode.POSITIVE else []:
        try:
            response = case.call(base_url=target.url, session=session, headers=target.headers, **CALL)
            tally.requests += 1
            tally.statuses[response.status_code] += 1
            tally.explicit += 1
            case.validate_response(response, checks=checks, headers=target.headers)
        except (FailureGroup, Exception) as exc:
            tally.failures.append(f"{operation.label} (explicit): {type(exc).__name__}: {exc}")
    try:
        exercise()
    except Unsatisfiable:
        # Nothing about the operation can be invalid (no parameters, no body): no negative input exists.
        assert mode == GenerationMode.NEGATIVE
        tally.no_negative_input.append(operation.label)
    except (FailureGroup, Exception) as exc:  # what the checks found, one of ours, a request that failed
        tally.failures.append(f"{operation.label} ({mode.value}): {type(exc).__name__}: {exc}")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_operation_answers_as_documented_and_never_5xx(target: Target) -> None:
    schema = schemathesis.openapi.from_url(f"{target.url}/openapi.json", headers=target.headers, timeout=30)
    loaded = list(schema.get_all_operations())
    operations = sorted((result.ok() for result in loaded if isinstance(result, Ok)), key=destructive)
    assert len(operations) == len(loaded), [r for r in loaded if not isinstance(r, Ok)]
    assert len(operations) >= 20, [op.label for op in operations]
    tally = Tally()
    with requests.Session() as session:
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                run_operation(operation, mode, target, session, tally)
    server_errors = sum(count for status, count in tally.statuses.items() if status >= 500)
    print(
        f"\nschemathesis, auth {'on' if target.auth else 'off'}: {len(operations)} operations, "
        f"{tally.requests} requests ({tally.explicit} explicit, {tally.unauthenticated} without the token), "
        f"statuses {dict(sorted(tally.statuses.items()))}; {server_errors} with 5xx, "
        f"{len(tally.failures)} failures; no invalid input possible for {tally.no_negative_input}"
    )
    assert tally.failures == [], "\n\n".join(tally.failures)
    assert server_errors == 0
    assert set(tally.by_operation) == {op.label for op in operations}


# What schemathesis found, pinned whatever Hypothesis draws next time.


def test_a_key_with_an_encoded_control_character_is_400_on_every_key_route(target: Target) -> None:
    """A newline in a key missed the key routes (their pattern does not match it): an undeclared 404."""
    with httpx.Client(base_url=target.url, headers=target.headers) as api:
        for method in ("PUT", "GET", "HEAD", "DELETE"):
            for raw in ("%0A", "%0d", "%1F", "%7F"):
                response = api.request(method, f"/v1/namespaces/0/entries/a{raw}b", content=b"x")
                assert response.status_code == 400, (method, raw, response.status_code)
                if method != "HEAD":
                    assert response.json()["error"] == "invalid_name"


def test_head_declares_what_get_answers(target: Target) -> None:
    """FastAPI declared a JSON body for HEAD on an entry, which answers the GET's octet-stream headers."""
    with httpx.Client(base_url=target.url, headers=target.headers) as api:
        document = api.get("/openapi.json").json()
        entry = document["paths"]["/v1/namespaces/{namespace}/entries/{key}"]
        assert entry["head"]["responses"]["200"] == entry["get"]["responses"]["200"]
        head = api.head("/v1/namespaces/0/entries/0")
        assert head.status_code == 200
        assert head.headers["content-type"] == api.get("/v1/namespaces/0/entries/0").headers["content-type"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/admin/evict", {"older_than_seconds": True, "dry_run": True}),
        ("/admin/evict", {"max_total_bytes": "0", "dry_run": True}),
        ("/admin/gc", {"grace_seconds": True, "dry_run": True}),
        ("/admin/evict", {"max_total_bytes": 0, "dry_run": "yes"}),
    ],
    ids=["true-seconds", "string-bytes", "true-grace", "string-flag"],
)
def test_admin_bodies_refuse_what_their_schema_refuses(
    client: TestClient, path: str, body: dict[str, Any]
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 400, f"{path} took {body}: {response.status_code} {response.text}"
