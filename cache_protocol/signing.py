"""Entry signatures: what an uploader signs, how keys are written, and the check both sides make.

An uploader holding an Ed25519 signing key signs each entry it uploads: a detached signature over the
message :func:`signed_message` builds from the namespace, the key, the SHA-256 of the bytes and the signer's
key id. The message is domain-separated and versioned (``xla-cache-entry-v1``), every field is a validated
name or hex digest (none can hold the NUL that separates them), so a signature made for one entry verifies
for no other entry, namespace or purpose.

On the wire a signature is one string, ``<key id>:<base64 signature>`` (the ``X-Entry-Signature`` header of
a PUT and a single read, the ``XLA_CACHE.signature`` PAX record of a bulk or bundle member, ``signature`` in
manifests and the change feed). A key id is the first 16 hex digits of the SHA-256 of the raw 32-byte public
key.

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "KEY_ID_PATTERN",
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
SIGNATURE_MAX_LENGTH = 16 + 1 + 88
_DOMAIN = b"xla-cache-entry-v1\x00"


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


@dataclass(frozen=True)
class Signature:
    """A parsed signature: who signed (``signer``, a key id) and the 64 signature bytes."""

    signer: str
    raw: bytes

    def text(self) -> str:
        """The wire form, ``<key id>:<base64>``."""
        return f"{self.signer}:{base64.b64encode(self.raw).decode()}"


def parse_signature(text: str) -> Signature:
    """Read a wire signature; :class:`ValueError` naming what is wrong with it."""
    signer, sep, encoded = text.strip().partition(":")
    if not sep or not KEY_ID_PATTERN.fullmatch(signer) or not _SIGNATURE_B64.fullmatch(encoded):
        raise ValueError(
            "a signature is '<key id>:<base64 signature>': 16 lowercase hex digits, a colon, and the 64-byte "
            "Ed25519 signature in standard base64"
        )
    return Signature(signer, base64.b64decode(encoded))


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
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_text(cls, text: str) -> Signer:
        """Read ``ed25519-private:<base64 seed>`` (the first key line of a key file's text)."""
        lines = list(_key_lines(text))
        if len(lines) != 1:
            raise BadKey(f"a signing key is one line {PRIVATE_PREFIX}<base64>; found {len(lines)} key lines")
        return cls(Ed25519PrivateKey.from_private_bytes(_decode(lines[0], PRIVATE_PREFIX, "a signing key")))

    def private_text(self) -> str:
        """The key as a one-line text (secret)."""
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
        self._keys = {kid: Ed25519PublicKey.from_public_bytes(raw) for kid, raw in keys.items()}

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
        signer = signature[:16]
        public = self._keys.get(signer)
        if public is None:
            return "untrusted signer"
        try:
            parsed = parse_signature(signature)
            public.verify(parsed.raw, signed_message(namespace, key, sha256, signer))
        except (ValueError, InvalidSignature):
            return "bad signature"
        return None
