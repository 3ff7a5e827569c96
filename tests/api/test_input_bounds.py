"""Input out of range for storage or the index is a clear 400, never a 5xx, and nothing is half-written."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cache_protocol import BUNDLE_COMPILE_TIME_PAX, BUNDLE_SHA256_PAX, SHA256_HEADER
from tests.support.api import sha

URL = "/v1/namespaces/bounds/entries"


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"level": value}
    return value


@pytest.mark.parametrize("compile_ms", [str(2**31), str(10**30), "-1"])
def test_a_compile_time_too_large_for_the_index_stores_nothing(
    client: TestClient, settings_dir: Path, compile_ms: str
) -> None:
    headers = {SHA256_HEADER: sha(b"x"), "X-Compile-Time-Ms": compile_ms}
    response = client.put(f"{URL}/k", content=b"x", headers=headers)
    assert response.status_code == 400 and response.json()["error"] == "bad_request"
    assert client.get(f"{URL}/k").status_code == 404
    assert not (settings_dir / "blobs" / "bounds").exists()  # no orphan blob either


def test_the_largest_compile_time_is_kept(client: TestClient) -> None:
    headers = {SHA256_HEADER: sha(b"x"), "X-Compile-Time-Ms": str(2**31 - 1)}
    assert client.put(f"{URL}/k", content=b"x", headers=headers).status_code == 201


def test_a_key_is_at_most_a_file_name_long(client: TestClient) -> None:
    longest = "k" * 255
    assert client.put(f"{URL}/{longest}", content=b"x", headers={SHA256_HEADER: sha(b"x")}).status_code == 201
    assert client.get(f"{URL}/{longest}").content == b"x"
    too_long = client.put(f"{URL}/{longest}k", content=b"x", headers={SHA256_HEADER: sha(b"x")})
    assert too_long.status_code == 400 and "at most 255" in too_long.json()["detail"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/admin/evict", {"older_than_seconds": 1e300}),
        ("/admin/evict", {"older_than_seconds": "Infinity"}),
        ("/admin/evict", {"max_total_bytes": 2**70}),
        ("/admin/gc", {"grace_seconds": 1e300}),
        ("/admin/gc", {"grace_seconds": "NaN"}),
    ],
)
def test_periods_and_sizes_beyond_what_dates_and_columns_hold_are_refused(
    client: TestClient, path: str, body: dict[str, Any]
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 400, response.text


def test_a_deeply_nested_fingerprint_is_refused_and_the_namespace_stays_usable(client: TestClient) -> None:
    deep = client.put("/v1/namespaces/deep", json={"fingerprint": nested(200)})
    assert deep.status_code == 400 and "nests deeper" in deep.json()["detail"]
    assert client.get("/v1/namespaces/deep").status_code == 404  # nothing saved
    fine = client.put("/v1/namespaces/deep", json={"fingerprint": nested(8), "labels": {"team": "x"}})
    assert fine.status_code == 201
    assert client.get("/v1/namespaces/deep").json()["fingerprint"] == nested(8)
    huge = client.put("/v1/namespaces/deep", json={"fingerprint": {"blob": "x" * 100_000}})
    assert huge.status_code == 400
    labels = client.put("/v1/namespaces/deep", json={"labels": {str(i): "x" for i in range(65)}})
    assert labels.status_code == 400


def test_the_openapi_document_says_what_the_server_does(client: TestClient) -> None:
    """Invalid input is declared as the 400 it is (not FastAPI's 422), names have their patterns, and the
    bearer scheme is there; and the patterns are those the server enforces."""
    document = client.get("/openapi.json").json()
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    entry = document["paths"]["/v1/namespaces/{namespace}/entries/{key}"]
    for method in ("get", "put", "delete"):
        responses = entry[method]["responses"]
        assert "422" not in responses and "400" in responses, method
    key = next(p for p in entry["put"]["parameters"] if p["name"] == "key")["schema"]
    assert key["maxLength"] == 255
    assert re.fullmatch(key["pattern"], "137088755305343888964398401303341114028")
    assert not re.fullmatch(key["pattern"], ".hidden")
    missing = document["paths"]["/v1/namespaces/{namespace}/missing"]["post"]["responses"]
    assert "422" not in missing and "400" in missing
    assert client.post("/v1/namespaces/ns/missing", json={"keys": "not a list"}).status_code == 400
    assert not any(
        "422" in op.get("responses", {}) for ops in document["paths"].values() for op in ops.values()
    )


@pytest.mark.parametrize(
    "compile_ms", ["9" * 5000, "\u00b2", str(2**31)], ids=["5000-digits", "superscript", "2^31"]
)
def test_a_bulk_members_compile_time_beyond_what_int_reads_is_refused(
    client: TestClient, compile_ms: str
) -> None:
    """A PAX compile time of 5,000 digits, or a digit int() does not read ("²"), answered 500 (ValueError)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("k")
        info.size = 1
        info.pax_headers = {BUNDLE_SHA256_PAX: sha(b"x"), BUNDLE_COMPILE_TIME_PAX: compile_ms}
        archive.addfile(info, io.BytesIO(b"x"))
    response = client.post(URL, content=out.getvalue(), headers={"Content-Type": "application/x-tar"})
    assert response.status_code == 200, response.text
    assert [(m["key"], m["status"]) for m in response.json()["results"]] == [("k", 400)]
    assert client.get(f"{URL}/k").status_code == 404


@pytest.mark.parametrize("uploader", ["x\x9b2J\x9b31mPWNED", "host\x1b[2J", "a\tb"])
def test_an_uploader_label_a_terminal_would_obey_is_refused_and_stores_nothing(
    client: TestClient, settings_dir: Path, uploader: str
) -> None:
    """The third probe's escape sequences, sent as ``X-Uploader`` (a header is Latin-1: U+009B, one byte)."""
    headers: dict[str, str | bytes] = {SHA256_HEADER: sha(b"x"), "X-Uploader": uploader.encode("latin-1")}
    response = client.put(f"{URL}/k", content=b"x", headers=headers)
    assert response.status_code == 400, response.text
    assert "X-Uploader" in response.json()["detail"] and "U+00" in response.json()["detail"]
    assert client.get(f"{URL}/k").status_code == 404
    assert not (settings_dir / "blobs" / "bounds").exists()
    plain = {**headers, "X-Uploader": "host-7"}
    assert client.put(f"{URL}/k", content=b"x", headers=plain).status_code == 201


@pytest.mark.parametrize(("name", "status", "too_large"), [("bad..ns", 400, 400), ("fine", 201, 413)])
def test_a_put_checks_its_names_and_size_once_and_answers_as_before(
    client: TestClient, name: str, status: int, too_large: int
) -> None:
    """The writer checks a PUT's namespace, key and declared size (the route no longer checks first)."""
    digest = {SHA256_HEADER: sha(b"x")}
    response = client.put(f"/v1/namespaces/{name}/entries/k", content=b"x", headers=digest)
    assert response.status_code == status, response.text
    big = client.put(
        f"/v1/namespaces/{name}/entries/big",
        content=b"x",
        headers={SHA256_HEADER: sha(b"x"), "Content-Length": str(2**40)},
    )
    assert big.status_code == too_large, big.text
    assert client.get(f"/v1/namespaces/{name}/entries/big").status_code in (400, 404)
