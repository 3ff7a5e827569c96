"""Entry signatures on upload: the one check the writer makes of every entry, a PUT and a bulk member alike.

The server knows the public keys of ``XLA_CACHE_SIGNER_KEYS`` and, per namespace pattern,
``XLA_CACHE_REQUIRE_SIGNATURES`` names the key ids whose signatures the namespace requires (``*``: any key
the server knows). An upload into such a namespace is refused, before any of its bytes is stored, when it is
unsigned (:class:`~cache_server.errors.SignatureRequired`) or not validly signed by an accepted key over
exactly its namespace, key and digest (:class:`~cache_server.errors.SignatureInvalid`). Elsewhere a
signature is checked when the server knows its key (a wrong one is refused the same way) and kept as sent
otherwise: the clients that trust that key judge it. Only a signature the server verified names the entry's
signer in the index (``/admin/signers``, the signer purges); one it could not check leaves the signer empty,
like an unsigned entry's.

The server's check only keeps bad signatures out of the index; what protects a job is its own check
(``XLA_CACHE_TRUSTED_KEYS``), because a server or bucket that is not to be trusted would skip this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase

from cache_protocol.signing import (
    KEY_ID_PATTERN,
    SIGNATURE_HEADER,
    Verifier,
    parse_public_keys,
    parse_signature,
    read_key_texts,
)
from cache_server.errors import BadRequest, SignatureInvalid, SignatureRequired
from cache_server.settings import Settings

__all__ = ["ANY_KEY", "SignaturePolicy"]

ANY_KEY = "*"


class SignaturePolicy:
    """Which namespaces require signatures by which keys, and the keys the server can check."""

    def __init__(self, keys: Mapping[str, bytes], required: Mapping[str, Sequence[str]]) -> None:
        self._verifier = Verifier(keys)
        for pattern, ids in required.items():
            for kid in ids:
                if kid != ANY_KEY and kid not in keys:
                    problem = "is not a key id" if not KEY_ID_PATTERN.fullmatch(kid) else "has no public key"
                    raise ValueError(
                        f"XLA_CACHE_REQUIRE_SIGNATURES[{pattern!r}]: {kid!r} {problem} in "
                        "XLA_CACHE_SIGNER_KEYS"
                    )
        self._required = [(pattern, frozenset(ids)) for pattern, ids in required.items()]
        self._by_namespace: dict[str, tuple[str, frozenset[str]] | None] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> SignaturePolicy:
        """The policy of ``XLA_CACHE_SIGNER_KEYS`` and ``XLA_CACHE_REQUIRE_SIGNATURES``; :class:`ValueError`
        (at start) for a key file that cannot be read or a required key id the server has no key of."""
        try:
            keys = parse_public_keys(read_key_texts(settings.signer_keys)) if settings.signer_keys else {}
        except OSError as exc:
            raise ValueError(f"XLA_CACHE_SIGNER_KEYS: cannot read {exc.filename} ({exc.strerror})") from None
        return cls(keys, settings.require_signatures)

    def requirement(self, namespace: str) -> tuple[str, frozenset[str]] | None:
        """The first pattern matching ``namespace`` and the key ids it accepts, or None (not required)."""
        if namespace not in self._by_namespace:
            found = next(((p, ids) for p, ids in self._required if fnmatchcase(namespace, p)), None)
            if len(self._by_namespace) > 10_000:
                self._by_namespace.clear()
            self._by_namespace[namespace] = found
        return self._by_namespace[namespace]

    def check(
        self, namespace: str, key: str, sha256: str, signature: str | None
    ) -> tuple[str | None, str | None]:
        """The signature to keep with the entry (None: unsigned) and its signer's key id if this server
        verified it (None otherwise: unsigned, or signed by a key it does not know, kept for the clients to
        judge), or the error it is refused with."""
        required = self.requirement(namespace)
        if not signature:
            if required is not None:
                raise SignatureRequired(
                    f"Namespace {namespace!r} requires entries signed by an accepted key (pattern "
                    f"{required[0]!r}); {key!r} is unsigned and nothing of it was stored."
                )
            return None, None
        try:
            parsed = parse_signature(signature)
        except ValueError as exc:
            raise BadRequest(f"{SIGNATURE_HEADER} of {key!r}: {exc}.") from None
        if required is not None and ANY_KEY not in required[1] and parsed.signer not in required[1]:
            raise SignatureInvalid(
                f"{key!r} is signed by key {parsed.signer}, which namespace {namespace!r} does not accept "
                f"(pattern {required[0]!r}); nothing of it was stored."
            )
        known = parsed.signer in self._verifier.key_ids
        if required is not None and not known:
            raise SignatureInvalid(
                f"{key!r} is signed by key {parsed.signer}, unknown to this server; nothing of it was stored."
            )
        if known and self._verifier.why_not(namespace, key, sha256, signature) is not None:
            raise SignatureInvalid(
                f"The signature of {key!r} by key {parsed.signer} does not cover namespace {namespace!r}, "
                "this key and this digest; nothing of it was stored."
            )
        return parsed.text(), parsed.signer if known else None
