"""Entry signatures: what an uploader signs, how keys are written, and the check both sides make.

An uploader holding an Ed25519 signing key signs each entry it uploads: a detached signature over the
message :func:`signed_message` builds from the namespace, the key, the SHA-256 of the bytes and the signer's
key id. The message is domain-separated and versioned (``xla-cache-entry-v1``), every field is a validated
name or hex digest (none can hold the NUL that separates them), so a signature made for one entry verifies
for no other entry, namespace or purpose.

On the wire a signature is one string, ``<key id>:<base64 signature>`` (the ``X-Entry-Signature`` header of
a PUT and a single read, the ``XLA_CACHE.signature`` PAX record of a bulk or bundle member, ``signature`` in
manifests and the change feed). A key id is the first 16 hex digits of the SHA-256 of the raw 32-byte public
key. Entries uploaded together are signed as one batch (:meth:`Signer.sign_batch`): one signature over the
root of a hash tree (leaves ``sha256(0x00 || message)``, nodes ``sha256(0x01 || left || right)``) of their
messages, each entry's wire form adding ``:<index>:<base64 path>`` (its place and the siblings up to the
root), so each still verifies on its own and a verifier checks one Ed25519 signature per batch.

Keys are one-line texts, so that they fit an environment variable as well as a file:
``ed25519-private:<base64 of the 32-byte seed>`` and ``ed25519:<base64 of the 32-byte public key>``. A key
file holds one per line (blank lines and ``#`` comments ignored; anything after the key on its line is a
label).

Ed25519 comes from ``cryptography`` (OpenSSL); it releases the GIL while it verifies, so a client verifies
in a thread beside its downloads. Public key objects are built once per key (:class:`Verifier`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # cryptography is imported where a key is used: a command that signs nothing never pays it
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "KEY_ID_PATTERN",
    "MAX_DEPTH",
    "PRIVATE_PREFIX",
    "PUBLIC_PREFIX",
    "SIGNATURE_HEADER",
    "SIGNATURE_MAX_LENGTH",
    "SIGNATURE_PAX",
    "BadKey",
    "Signature",
    "Signer",
    "Verifier",
    "key_id",
    "parse_public_keys",
    "parse_signature",
    "read_key_texts",
    "signed_message",
]

SIGNATURE_HEADER = "X-Entry-Signature"
"""On a PUT and a single read: the entry's signature, ``<key id>:<base64 signature>``."""
SIGNATURE_PAX = "XLA_CACHE.signature"
"""The PAX record of a bulk upload's or a bundle's member carrying what ``X-Entry-Signature`` carries."""
PUBLIC_PREFIX = "ed25519:"
PRIVATE_PREFIX = "ed25519-private:"
KEY_ID_PATTERN = re.compile(r"[0-9a-f]{16}")
"""A signer's key id: the first 16 hex digits of the SHA-256 of its raw public key."""
_SIGNATURE_B64 = re.compile(r"[A-Za-z0-9+/]{86}==")  # 64 bytes in standard base64
_DOMAIN = b"xla-cache-entry-v1\x00"
_BATCH_DOMAIN = b"xla-cache-batch-v1\x00"  # what a batch signature signs: this, then the tree's root
MAX_DEPTH = 16
"""The deepest batch tree a signature may prove a leaf of (65,536 entries signed together)."""
SIGNATURE_MAX_LENGTH = 800
"""The longest wire signature: a batch one at :data:`MAX_DEPTH` is 16+1+88+1+5+1+684 characters."""


class BadKey(ValueError):
    """A key text (or key file line) that is not a valid Ed25519 key of the expected kind."""


def signed_message(namespace: str, key: str, sha256: str, signer: str) -> bytes:
    """The bytes an entry's signature covers. The caller passes validated names and a hex digest (none
    contains NUL), so the fields cannot run into each other."""
    return b"%s%s\x00%s\x00%s\x00%s" % (
        _DOMAIN,
        namespace.encode(),
        key.encode(),
        sha256.encode(),
        signer.encode(),
    )


def key_id(public: bytes) -> str:
    """The key id of a raw 32-byte Ed25519 public key."""
    return hashlib.sha256(public).hexdigest()[:16]


def _leaf(message: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + message).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _root(leaf: bytes, index: int, path: bytes) -> bytes:
    """The root of the tree that ``path`` (the siblings, leaf level first) proves ``leaf`` at ``index`` of."""
    node = leaf
    for depth in range(len(path) // 32):
        sibling = path[32 * depth : 32 * depth + 32]
        node = _node(sibling, node) if (index >> depth) & 1 else _node(node, sibling)
    return node


@dataclass(frozen=True)
class Signature:
    """A parsed signature: who signed (``signer``, a key id) and the 64 signature bytes; for a batch
    signature also the entry's place in the batch's tree (``index``) and its siblings there (``path``)."""

    signer: str
    raw: bytes
    index: int | None = None
    path: bytes = b""

    def text(self) -> str:
        """The wire form: ``<key id>:<base64 signature>``, for a batch with ``:<index>:<base64 path>``."""
        single = f"{self.signer}:{base64.b64encode(self.raw).decode()}"
        if self.index is None:
            return single
        return f"{single}:{self.index}:{base64.b64encode(self.path).decode()}"


_FORM = (
    "a signature is '<key id>:<base64 signature>' (16 lowercase hex digits, a colon, the 64-byte Ed25519 "
    "signature in standard base64), for a batch followed by ':<index>:<base64 path>'"
)


def _canonical_b64(text: str) -> bytes:
    """The bytes of standard, padded base64 ``text`` written the one way :func:`base64.b64encode` writes
    them (unused low bits zero): another spelling of the same bytes is a :class:`ValueError`, so a signature
    has one wire form and cannot be told apart from itself by a cache or a count."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(_FORM) from None
    if base64.b64encode(raw).decode() != text:
        raise ValueError(f"{_FORM}; the base64 is not in its canonical spelling")
    return raw


def parse_signature(text: str) -> Signature:
    """Read a wire signature (surrounding whitespace ignored, the rest in its one canonical spelling:
    :meth:`Signature.text` of the result gives it back); :class:`ValueError` naming what is wrong."""
    text = text.strip()
    parts = text.split(":")
    if (
        len(parts) not in (2, 4)
        or len(text) > SIGNATURE_MAX_LENGTH
        or not KEY_ID_PATTERN.fullmatch(parts[0])
        or not _SIGNATURE_B64.fullmatch(parts[1])
    ):
        raise ValueError(_FORM)
    raw = _canonical_b64(parts[1])
    if len(parts) == 2:
        return Signature(parts[0], raw)
    index_text, path_text = parts[2], parts[3]
    path = _canonical_b64(path_text)
    depth = len(path) // 32
    if not (index_text.isascii() and index_text.isdigit() and len(index_text) <= 6):
        raise ValueError(_FORM)
    index = int(index_text)
    if str(index) != index_text:
        raise ValueError(f"{_FORM}; the index is written without leading zeros")
    if len(path) % 32 or not 1 <= depth <= MAX_DEPTH or index >> depth:
        raise ValueError(f"{_FORM}; the path is whole 32-byte hashes, 1 to {MAX_DEPTH}, and holds the index")
    return Signature(parts[0], raw, index, path)


def _decode(text: str, prefix: str, what: str) -> bytes:
    if not text.startswith(prefix):
        raise BadKey(f"{what} must start with {prefix!r}")
    try:
        raw = base64.b64decode(text[len(prefix) :], validate=True)
    except (binascii.Error, ValueError):
        raise BadKey(f"{what} is not valid base64 after {prefix!r}") from None
    if len(raw) != 32:
        raise BadKey(f"{what} holds {len(raw)} bytes; an Ed25519 key has 32")
    return raw


def _raw_public(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class Signer:
    """An uploader's signing key: signs entries as :func:`signed_message` says."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        self.public = _raw_public(private.public_key())
        self.key_id = key_id(self.public)

    @classmethod
    def generate(cls) -> Signer:
        """A new random key."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_text(cls, text: str) -> Signer:
        """Read ``ed25519-private:<base64 seed>`` (the first key line of a key file's text)."""
        lines = list(_key_lines(text))
        if len(lines) != 1:
            raise BadKey(f"a signing key is one line {PRIVATE_PREFIX}<base64>; found {len(lines)} key lines")
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.from_private_bytes(_decode(lines[0], PRIVATE_PREFIX, "a signing key")))

    def private_text(self) -> str:
        """The key as a one-line text (secret)."""
        from cryptography.hazmat.primitives import serialization

        seed = self._private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        return PRIVATE_PREFIX + base64.b64encode(seed).decode()

    def public_text(self) -> str:
        """The public key as a one-line text (what clients and the server trust)."""
        return PUBLIC_PREFIX + base64.b64encode(self.public).decode()

    def sign(self, namespace: str, key: str, sha256: str) -> str:
        """The wire signature of an entry."""
        raw = self._private.sign(signed_message(namespace, key, sha256, self.key_id))
        return Signature(self.key_id, raw).text()

    def sign_batch(self, namespace: str, entries: Sequence[tuple[str, str]]) -> list[str]:
        """The wire signatures of many entries (``(key, sha256)`` each), with one Ed25519 signature: over
        the root of a hash tree whose leaves are the entries' :func:`signed_message`; each entry's
        signature carries its place and its path to the root, so each verifies on its own, and a verifier
        checks the one signature once per batch. One entry alone gets a plain signature."""
        if len(entries) <= 1:
            return [self.sign(namespace, key, sha256) for key, sha256 in entries]
        if len(entries) > 1 << MAX_DEPTH:
            raise ValueError(f"at most {1 << MAX_DEPTH} entries are signed together")
        level = [_leaf(signed_message(namespace, key, sha256, self.key_id)) for key, sha256 in entries]
        width = 1 << (len(level) - 1).bit_length()
        level += [level[-1]] * (width - len(level))  # a power of two: the last leaf again
        levels = [level]
        while len(level) > 1:
            level = [_node(level[i], level[i + 1]) for i in range(0, len(level), 2)]
            levels.append(level)
        raw = self._private.sign(_BATCH_DOMAIN + level[0])
        return [
            Signature(
                self.key_id, raw, i, b"".join(levels[d][(i >> d) ^ 1] for d in range(len(levels) - 1))
            ).text()
            for i in range(len(entries))
        ]


def _key_lines(text: str) -> Iterable[str]:
    """The keys of a text: per line, before any ``#``, comma-separated items, each a key and maybe a label."""
    for line in text.splitlines():
        for item in line.split("#", 1)[0].split(","):
            if item.strip():
                yield item.split()[0]


def parse_public_keys(text: str) -> dict[str, bytes]:
    """The public keys in a key file's text (or several, separated by commas or whitespace), by key id."""
    keys: dict[str, bytes] = {}
    for line in _key_lines(text):
        raw = _decode(line, PUBLIC_PREFIX, "a public key")
        keys[key_id(raw)] = raw
    return keys


def read_key_texts(value: str) -> str:
    """A setting that holds keys or names files holding them (comma separated, mixed): their texts joined.
    An item starting with ``ed25519`` is a key; any other is a path."""
    texts: list[str] = []
    for item in value.replace("\n", ",").split(","):
        item = item.strip()
        if not item:
            continue
        texts.append(item if item.startswith("ed25519") else Path(item).expanduser().read_text())
    return "\n".join(texts)


class Verifier:
    """Checks signatures against a set of trusted public keys (by key id), each key object built once."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        self._keys = {kid: Ed25519PublicKey.from_public_bytes(raw) for kid, raw in keys.items()}
        # The nodes of batch trees whose root's signature was verified, as (key id, signature, depth, hash):
        # a later entry of the batch stops at the first of them on its path (most at the first or second).
        self._known: set[tuple[str, bytes, int, bytes]] = set()

    def _verify_in_batch(self, public: Ed25519PublicKey, parsed: Signature, leaf: bytes) -> None:
        """Walk from ``leaf`` up its path until a node known to be in a verified tree of this signature, or
        to the root, whose signature is then verified; :class:`InvalidSignature` if it does not verify."""
        assert parsed.index is not None
        signer, raw, index, path = parsed.signer, parsed.raw, parsed.index, parsed.path
        known = self._known
        node, walked = leaf, []
        depth = 0
        for depth in range(len(path) // 32):
            if (signer, raw, depth, node) in known:
                break
            walked.append((signer, raw, depth, node))
            sibling = path[32 * depth : 32 * depth + 32]
            node = _node(sibling, node) if (index >> depth) & 1 else _node(node, sibling)
        else:
            depth = len(path) // 32
            if (signer, raw, depth, node) not in known:
                public.verify(raw, _BATCH_DOMAIN + node)  # the root: once per batch
                walked.append((signer, raw, depth, node))
        if len(known) > 100_000:  # about 25 MB; a batch of 2,000 entries leaves about 4,000 nodes
            known.clear()
        known.update(walked)

    @property
    def key_ids(self) -> frozenset[str]:
        return frozenset(self._keys)

    def __bool__(self) -> bool:
        return bool(self._keys)

    def why_not(self, namespace: str, key: str, sha256: str, signature: str | None) -> str | None:
        """None if a trusted key signed exactly this entry; otherwise why not: ``unsigned``,
        ``untrusted signer``, ``bad signature``."""
        if not signature:
            return "unsigned"
        from cryptography.exceptions import InvalidSignature

        try:
            parsed = parse_signature(signature)  # first: the key id is read from the validated text
        except ValueError:
            return "bad signature"
        public = self._keys.get(parsed.signer)
        if public is None:
            return "untrusted signer"
        try:
            message = signed_message(namespace, key, sha256, parsed.signer)
            if parsed.index is None:
                public.verify(parsed.raw, message)
                return None
            self._verify_in_batch(public, parsed, _leaf(message))
        except (ValueError, InvalidSignature):
            return "bad signature"
        return None
