"""A stand-in for the IAM Credentials API's ``signBlob``; credentials like a VM's, or its metadata server.

    with FakeIamSigner(key, token="vm-token", accounts={SIGNER}) as iam:
        store = GcsBlobStore(bucket, endpoint=..., credentials=MetadataCredentials("vm-token", SIGNER),
                             iam_endpoint=iam.url)
        ...
    iam.calls            # signBlob requests answered with a signature
    iam.refusing = True  # answer 403 as IAM does without roles/iam.serviceAccountTokenCreator
    iam.outages = 2      # answer the next two requests 503, as an overloaded IAM does

:class:`FakeMetadataServer` answers what ``google.auth.compute_engine.Credentials`` ask a VM's metadata server
(the default account's email, a token), for tests of those real credentials.

``POST /v1/projects/-/serviceAccounts/{email}:signBlob`` with ``{"payload": base64}`` and a bearer token:
the payload signed RSA SHA-256 PKCS#1 v1.5 by the stand-in's key, as ``{"keyId", "signedBlob"}``. A wrong
token is 401, an account it does not know (or ``refusing``) 403 with Google's wording. ``latency`` seconds are
added to each answer, like the round trip to Google; ``max_in_flight`` is the most requests it held at once.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Collection
from types import TracebackType
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from google.auth.credentials import Credentials

from tests.support.http_stub import Recorded, Reply, StubHttpServer, json_reply

__all__ = ["KEY_ID", "FakeIamSigner", "FakeMetadataServer", "MetadataCredentials"]

KEY_ID = "fake-iam-key-1"
_SIGN_BLOB = re.compile(r"/v1/projects/-/serviceAccounts/(?P<account>[^/:]+):signBlob")


def _error(status: int, state: str, message: str) -> Reply:
    return json_reply(status, {"error": {"code": status, "message": message, "status": state}})


class FakeIamSigner:
    """``signBlob`` on a loopback port, signing with ``key`` for ``accounts`` holding bearer ``token``."""

    def __init__(
        self, key: rsa.RSAPrivateKey, *, token: str, accounts: Collection[str], latency: float = 0.0
    ) -> None:
        self.key = key
        self.token = token
        self.accounts = set(accounts)
        self.latency = latency
        self.refusing = False
        self.outages = 0
        self.calls = 0
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._stub = StubHttpServer(self._answer)
        self.url = self._stub.url

    @property
    def requests(self) -> list[Recorded]:
        return self._stub.requests

    def _answer(self, request: Recorded) -> Reply:
        with self._lock:
            if self.outages > 0:
                self.outages -= 1
                return _error(503, "UNAVAILABLE", "The service is currently unavailable.")
        match = _SIGN_BLOB.fullmatch(request.path)
        if request.method != "POST" or match is None:
            return _error(404, "NOT_FOUND", f"No such method: {request.method} {request.path}")
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return _error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
        account = match["account"]
        if self.refusing or account not in self.accounts:
            return _error(
                403,
                "PERMISSION_DENIED",
                f"Permission 'iam.serviceAccounts.signBlob' denied on resource (or it may not exist).: "
                f"projects/-/serviceAccounts/{account}",
            )
        try:
            payload = base64.b64decode(json.loads(request.body)["payload"], validate=True)
        except (ValueError, KeyError, TypeError):
            return _error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self.latency:
                time.sleep(self.latency)
            signature = self.key.sign(payload, padding.PKCS1v15(), hashes.SHA256())
        finally:
            with self._lock:
                self._in_flight -= 1
                self.calls += 1
        return json_reply(200, {"keyId": KEY_ID, "signedBlob": base64.b64encode(signature).decode()})

    def __enter__(self) -> FakeIamSigner:
        self._stub.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stub.__exit__(exc_type, exc, tb)


class MetadataCredentials(Credentials):  # type: ignore[misc]
    """Like a VM's metadata-server credentials: a token, a service account, and no key (not ``Signing``).

    With ``resolved=False`` the account is ``"default"`` until :meth:`refresh`, as on Compute Engine.
    """

    def __init__(self, token: str, service_account_email: str, *, resolved: bool = True) -> None:
        super().__init__()
        self.token = token
        self._fixed_token = token
        self._real_email = service_account_email
        self._email = service_account_email if resolved else "default"
        self.refreshes = 0

    @property
    def service_account_email(self) -> str:
        return self._email

    def refresh(self, request: Any) -> None:
        self.refreshes += 1
        self.token = self._fixed_token
        self._email = self._real_email


class FakeMetadataServer:
    """A VM's metadata server, as far as ``compute_engine.Credentials`` ask: account info and tokens.

    Point google-auth at it by its ``host`` (google-auth reads ``GCE_METADATA_HOST`` once, at import).
    """

    def __init__(self, service_account_email: str, token: str) -> None:
        self.email = service_account_email
        self.token = token
        self._stub = StubHttpServer(self._answer)
        self.host = self._stub.url.removeprefix("http://")

    @property
    def requests(self) -> list[Recorded]:
        return self._stub.requests

    def _answer(self, request: Recorded) -> Reply:
        flavor = {"Metadata-Flavor": "Google"}
        if request.headers.get("metadata-flavor") != "Google":
            return Reply(403, flavor)
        account = "/computeMetadata/v1/instance/service-accounts/default/"
        if request.path == account:
            info = {"email": self.email, "aliases": ["default"], "scopes": ["cloud-platform"]}
            return json_reply(200, info, flavor)
        if request.path == account + "token":
            return json_reply(
                200, {"access_token": self.token, "expires_in": 3600, "token_type": "Bearer"}, flavor
            )
        return Reply(404, flavor)

    def __enter__(self) -> FakeMetadataServer:
        self._stub.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stub.__exit__(exc_type, exc, tb)
