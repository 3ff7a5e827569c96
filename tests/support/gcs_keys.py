"""Throwaway service-account keys and a V4 signed-URL checker, for tests of signed downloads."""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qsl, urlsplit

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.support.server import free_port

__all__ = ["SIGNER", "key_info", "verify_v4"]

SIGNER = "cache-signer@test-project.iam.gserviceaccount.com"


def key_info(key: rsa.RSAPrivateKey) -> dict[str, str]:
    """A throwaway service-account key; its token endpoint is a closed local port, so nothing leaves."""
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "type": "service_account",
        "project_id": "test-project",
        "private_key_id": "test-key-1",
        "private_key": pem,
        "client_email": SIGNER,
        "client_id": "1234567890",
        "token_uri": f"http://127.0.0.1:{free_port()}/token",
    }


def verify_v4(url: str, key: rsa.RSAPrivateKey) -> dict[str, str]:
    """Check a V4 signed GET URL against the key the way GCS does; return its query parameters."""
    parts = urlsplit(url)
    params = dict(parse_qsl(parts.query))
    pairs = [p for p in parts.query.split("&") if not p.startswith("X-Goog-Signature=")]
    canonical_request = "\n".join(
        [
            "GET",
            parts.path,
            "&".join(sorted(pairs, key=lambda p: p.split("=", 1)[0])),
            f"host:{parts.netloc}\n",
            "host",
            "UNSIGNED-PAYLOAD",
        ]
    )
    scope = params["X-Goog-Credential"].split("/", 1)[1]
    string_to_sign = "\n".join(
        [
            "GOOG4-RSA-SHA256",
            params["X-Goog-Date"],
            scope,
            hashlib.sha256(canonical_request.encode()).hexdigest(),
        ]
    )
    key.public_key().verify(
        bytes.fromhex(params["X-Goog-Signature"]),
        string_to_sign.encode(),
        padding.PKCS1v15(),
        hashes.SHA256(),
    )
    return params
