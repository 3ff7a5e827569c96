"""The signed message and its two wire forms (one entry, or one entry of a batch signed together): every
entry of a batch verifies on its own, and a signature verifies for exactly the entry it was made for."""

from __future__ import annotations

import base64
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


def _other_spelling(b64: str) -> str:
    """The same bytes in non-canonical base64: the last data character's unused low bit set."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    data = b64.rstrip("=")
    return data[:-1] + alphabet[alphabet.index(data[-1]) ^ 1] + b64[len(data) :]


def test_a_signature_has_one_spelling_and_whitespace_around_it_is_ignored(signer: Signer) -> None:
    verifier = Verifier({signer.key_id: signer.public})
    single = signer.sign("ns", "a", digest("a"))
    batch = signer.sign_batch("ns", [("a", digest("a")), ("b", digest("b"))])[0]
    kid, sig = single.split(":")
    _, bsig, index, path = batch.split(":")
    respelled = [
        f"{kid}:{_other_spelling(sig)}",
        f"{kid}:{bsig}:0{index}:{path}",
        f"{kid}:{bsig}:{index}:{_other_spelling(path)}",
    ]
    for text in respelled:
        assert base64.b64decode(text.split(":")[1]) == base64.b64decode(sig if text.count(":") == 1 else bsig)
        with pytest.raises(ValueError):
            parse_signature(text)
        assert verifier.why_not("ns", "a", digest("a"), text) == "bad signature"
    for text in (f" {single}\n", f"\t{batch} "):  # the key id is read after stripping, as the rest is
        assert parse_signature(text).text() == text.strip()
        assert verifier.why_not("ns", "a", digest("a"), text) is None
