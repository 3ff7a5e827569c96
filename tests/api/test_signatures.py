"""Signed uploads on the server: a namespace that requires signatures refuses unsigned and wrongly signed
uploads (PUT and bulk members) before anything is stored; signatures are kept with the entry (index and
blob metadata, so reindex restores them) and served on single reads, manifests, bundles and the feed."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cache_protocol.signing import SIGNATURE_HEADER, SIGNATURE_PAX, Signer
from cache_server.domain import utcnow
from cache_server.index.entries import EntryRepository
from tests.support.api import entry_url, member, post_bulk, put, sha
from tests.support.apps import client_for, services_of

LOCKED = "locked-ns"
OPEN = "open-ns"


@pytest.fixture(scope="module")
def alice() -> Signer:
    return Signer.generate()


@pytest.fixture(scope="module")
def mallory() -> Signer:
    return Signer.generate()


@pytest.fixture
def http(tmp_path: Path, alice: Signer, mallory: Signer) -> TestClient:
    keys = tmp_path / "signers.pub"
    keys.write_text(f"{alice.public_text()} alice\n# mallory's key is known, but no namespace accepts it\n")
    settings = {
        "signer_keys": f"{keys},{mallory.public_text()}",
        "require_signatures": {"locked-*": [alice.key_id]},
    }
    with client_for(tmp_path, **settings) as client:
        yield client


def _signed(signer: Signer, namespace: str, key: str, data: bytes) -> dict[str, str]:
    return {SIGNATURE_HEADER: signer.sign(namespace, key, sha(data))}


def _stored(http: TestClient, namespace: str, key: str) -> bool:
    return http.head(entry_url(namespace, key)).status_code == 200


def test_a_requiring_namespace_refuses_unsigned_and_wrongly_signed_puts_and_stores_nothing(
    http: TestClient, alice: Signer, mallory: Signer
) -> None:
    data = b"executable" * 100
    refusals = {
        "unsigned": ({}, "signature_required"),
        "other-key": (_signed(mallory, LOCKED, "other-key", data), "signature_invalid"),
        "replayed": (_signed(alice, LOCKED, "another-key", data), "signature_invalid"),  # another key's
        "other-ns": (_signed(alice, "locked-other", "other-ns", data), "signature_invalid"),
        "other-bytes": (
            {SIGNATURE_HEADER: alice.sign(LOCKED, "other-bytes", sha(b"x"))},
            "signature_invalid",
        ),
    }
    for key, (headers, code) in refusals.items():
        response = put(http, LOCKED, key, data, **headers)
        assert (response.status_code, response.json()["error"]) == (403, code), key
        assert not _stored(http, LOCKED, key)
    assert not any(services_of(http).store.list())  # nothing reached the store
    response = put(http, LOCKED, "good", data, **_signed(alice, LOCKED, "good", data))
    assert response.status_code == 201, response.text
    bad = put(http, LOCKED, "garbled", data, **{SIGNATURE_HEADER: "not a signature"})
    assert (bad.status_code, bad.json()["error"]) == (400, "bad_request")


def test_bulk_members_are_judged_one_by_one(http: TestClient, alice: Signer) -> None:
    good, unsigned = b"good" * 50, b"unsigned" * 50
    answer = post_bulk(
        http,
        LOCKED,
        [
            member("k-good", good, **{SIGNATURE_PAX: alice.sign(LOCKED, "k-good", sha(good))}),
            member("k-unsigned", unsigned),
            member("k-replayed", unsigned, **{SIGNATURE_PAX: alice.sign(LOCKED, "k-good", sha(good))}),
        ],
    )
    assert answer.status_code == 200, answer.text
    statuses = {m["key"]: (m["status"], m["error"]) for m in answer.json()["results"]}
    assert statuses == {
        "k-good": (201, None),
        "k-unsigned": (403, "signature_required"),
        "k-replayed": (403, "signature_invalid"),
    }
    assert _stored(http, LOCKED, "k-good") and not _stored(http, LOCKED, "k-unsigned")


def test_signatures_are_served_everywhere_and_survive_a_reindex(
    http: TestClient, alice: Signer, mallory: Signer
) -> None:
    data = b"entry bytes" * 30
    signature = alice.sign(OPEN, "signed", sha(data))
    assert put(http, OPEN, "signed", data, **{SIGNATURE_HEADER: signature}).status_code == 201
    assert put(http, OPEN, "unsigned", data).status_code == 201  # not required here
    # a key the server knows is checked everywhere: a wrong signature by it is refused even here
    wrong = put(http, OPEN, "wrong", data, **{SIGNATURE_HEADER: mallory.sign(OPEN, "other", sha(data))})
    assert wrong.json()["error"] == "signature_invalid"

    assert http.get(entry_url(OPEN, "signed")).headers[SIGNATURE_HEADER] == signature
    assert SIGNATURE_HEADER not in http.head(entry_url(OPEN, "unsigned")).headers
    manifest = {
        e["key"]: e["signature"] for e in http.get(f"/v1/namespaces/{OPEN}/manifest").json()["entries"]
    }
    assert manifest == {"signed": signature, "unsigned": None}
    bundle = http.post(f"/v1/namespaces/{OPEN}/bundle", json={"keys": ["signed", "unsigned"]})
    with tarfile.open(fileobj=io.BytesIO(bundle.content)) as tar:
        pax = {m.name: m.pax_headers.get(SIGNATURE_PAX) for m in tar.getmembers()}
    assert pax == {"signed": signature, "unsigned": None}
    feed = http.get(f"/v1/namespaces/{OPEN}/feed", params={"after": 0, "wait": 0}).json()["entries"]
    assert {e["key"]: e["signature"] for e in feed} == {"signed": signature, "unsigned": None}

    services = services_of(http)
    entries = EntryRepository(services.database)
    lost = entries.delete_entry(OPEN, "signed", policy="lost", when=utcnow())
    assert lost is not None  # the index loses the row ...
    services.reindexer.run()  # ... and reindex rebuilds it from the blob's metadata
    row = entries.get_entry(OPEN, "signed")
    assert row is not None and (row.signer, row.signature) == (alice.key_id, signature)


def test_only_a_signature_the_server_verified_names_a_signer(http: TestClient, alice: Signer) -> None:
    """A signature by a key the server does not know is kept for the clients, but counts as no signer in
    /admin/signers and goes with the unsigned purge; alice's (known, verified) names her, reindexed too."""
    carol = Signer.generate()  # unknown to the server
    data = b"entry bytes" * 30
    by_carol = carol.sign(OPEN, "carol", sha(data))
    assert put(http, OPEN, "carol", data, **{SIGNATURE_HEADER: by_carol}).status_code == 201
    assert put(http, OPEN, "alice", data, **_signed(alice, OPEN, "alice", data)).status_code == 201
    assert http.get(entry_url(OPEN, "carol")).headers[SIGNATURE_HEADER] == by_carol  # kept as sent
    services = services_of(http)
    services.reindexer.run()
    signers = {s["signer"]: s["entries"] for s in http.get("/admin/signers").json()["signers"]}
    assert signers == {alice.key_id: 1, None: 1}
    purged = http.post("/admin/signers/unsigned/purge", json={})
    assert purged.status_code == 200, purged.text
    assert not _stored(http, OPEN, "carol") and _stored(http, OPEN, "alice")
