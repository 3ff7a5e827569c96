"""The signed message and its two wire forms (one entry, or one entry of a batch signed together): every
entry of a batch verifies on its own, and a signature verifies for exactly the entry it was made for."""

from __future__ import annotations

import hashlib

import pytest

from cache_protocol.signing import Signer, Verifier, parse_signature


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate()


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 13])
def test_every_entry_of_a_batch_verifies_and_none_for_another(signer: Signer, count: int) -> None:
    entries = [(f"k{i}", digest(f"bytes {i}")) for i in range(count)]
    signatures = signer.sign_batch("ns", entries)
    verifier = Verifier({signer.key_id: signer.public})
    for (key, sha), signature in zip(entries, signatures, strict=True):
        assert parse_signature(signature).text() == signature
        assert verifier.why_not("ns", key, sha, signature) is None
        assert verifier.why_not("other-ns", key, sha, signature) == "bad signature"
        assert verifier.why_not("ns", key + "x", sha, signature) == "bad signature"
        assert verifier.why_not("ns", key, digest("other bytes"), signature) == "bad signature"
    if count > 1:  # one Ed25519 signature per batch; another entry's proof does not prove this one
        assert len({parse_signature(s).raw for s in signatures}) == 1
        fresh = Verifier({signer.key_id: signer.public})
        assert fresh.why_not("ns", entries[0][0], entries[0][1], signatures[1]) == "bad signature"
        assert fresh.why_not("ns", entries[1][0], entries[1][1], signatures[1]) is None
        # ... nor does a known batch vouch for an entry outside it
        assert fresh.why_not("ns", "stranger", digest("s"), signatures[0]) == "bad signature"


def test_malformed_untrusted_and_absent_signatures(signer: Signer) -> None:
    verifier = Verifier({signer.key_id: signer.public})
    good = signer.sign_batch("ns", [("a", digest("a")), ("b", digest("b"))])[0]
    kid, sig, index, path = good.split(":")
    assert verifier.why_not("ns", "a", digest("a"), None) == "unsigned"
    assert Verifier({}).why_not("ns", "a", digest("a"), good) == "untrusted signer"
    for bad in (f"{kid}:{sig}:7:{path}", f"{kid}:{sig}:{index}:", f"{kid}:{sig}:x:{path}", f"{kid}:abc", kid):
        assert verifier.why_not("ns", "a", digest("a"), bad) == "bad signature"
        with pytest.raises(ValueError):
            parse_signature(bad)
