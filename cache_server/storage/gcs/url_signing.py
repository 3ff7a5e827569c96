"""Signing through IAM, for credentials that hold no private key: a VM's (or pod's) attached service account.

Google recommends running on the attached service account with no key file on disk, but the credentials its
metadata server gives can only ask for tokens, not sign. The IAM Credentials API signs on their behalf:
``POST /v1/projects/-/serviceAccounts/{email}:signBlob`` returns the payload signed (RSA SHA-256) with one of
the account's Google-held keys, which is exactly the signature a V4 signed URL carries. The account needs
``iam.serviceAccounts.signBlob`` on itself (``roles/iam.serviceAccountTokenCreator`` granted to the account
on the account), and its token a scope that covers IAM (a VM's ``cloud-platform`` access scope).

:class:`IamSigner` is a :class:`google.auth.credentials.Signing` whose :meth:`~IamSigner.sign_bytes` is that
call, so google-cloud-storage's V4 helper builds the URL as for a key file. The call goes through the
store's :class:`~.transport.Transport` retry policy and timeout; what still fails raises the vendor error
for the store to word as :class:`~cache_server.errors.StorageUnavailable`. A refusal (403: the role is
missing; any other 4xx) is a configuration problem, not an outage: it is logged with the fix, raises
:class:`SigningRefused` (the store then answers "cannot sign", so the server streams), and for
:data:`REFUSAL_PAUSE_SECONDS` no further call is made.

Each URL costs one round trip, so the store signs a batch with :data:`SIGNING_CONCURRENCY` calls at once.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import requests
from google.auth import crypt
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import Credentials, Scoped, Signing
from google.auth.transport.requests import AuthorizedSession, Request
from requests.adapters import HTTPAdapter

from cache_server.storage.gcs.transport import POOL_SIZE, HttpError, Transport, describe, is_transient

__all__ = [
    "IAM_ENDPOINT",
    "REFUSAL_PAUSE_SECONDS",
    "SIGNING_CONCURRENCY",
    "IamSigner",
    "SigningRefused",
    "service_account_of",
]

log = logging.getLogger(__name__)

IAM_ENDPOINT = "https://iamcredentials.googleapis.com"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_SCOPES_FOR_IAM = frozenset({CLOUD_PLATFORM_SCOPE, "https://www.googleapis.com/auth/iam"})
SIGNING_CONCURRENCY = 32  # signBlob calls in flight at once, per store: IAM has a per-project request quota
REFUSAL_PAUSE_SECONDS = 60.0  # after a refusal, no signing is tried for this long
UNRESOLVED_EMAIL = "default"  # what metadata-server credentials call their account until refreshed


class SigningRefused(Exception):
    """IAM refused to sign (a missing role, an unknown account): the store cannot sign for now."""


def service_account_of(credentials: Credentials) -> str | None:
    """The service account ``credentials`` act as, if they say (``"default"`` on a VM until refreshed)."""
    email = getattr(credentials, "service_account_email", None)
    return email if isinstance(email, str) and email else None


def _scoped_for_iam(credentials: Credentials) -> Credentials:
    """``credentials`` with a scope that lets their token call IAM (the store's own is storage-only).

    On Compute Engine the metadata server ignores requested scopes (the VM's access scopes apply); elsewhere
    (Cloud Run, federated credentials) it honours them.
    """
    if not isinstance(credentials, Scoped):
        return credentials
    scopes = set(credentials.scopes or ()) | set(getattr(credentials, "default_scopes", None) or ())
    if scopes & _SCOPES_FOR_IAM:
        return credentials
    scoped: Credentials = credentials.with_scopes([CLOUD_PLATFORM_SCOPE])  # type: ignore[no-untyped-call]
    return scoped


class IamSigner(Signing, crypt.Signer):
    """Signs as service account ``service_account`` (else the one the credentials act as) through IAM.

    ``transport`` gives the retry policy and timeout; ``endpoint`` is the IAM Credentials API's base URL.
    Safe for concurrent use by threads. Call :meth:`close` when done.
    """

    def __init__(
        self,
        transport: Transport,
        credentials: Credentials,
        *,
        service_account: str | None = None,
        endpoint: str = IAM_ENDPOINT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._transport = transport
        self._credentials = _scoped_for_iam(credentials)
        self._email = service_account or service_account_of(self._credentials) or UNRESOLVED_EMAIL
        self.endpoint = endpoint.rstrip("/")
        self._clock = clock
        self._lock = threading.Lock()
        self._refused_until: float | None = None
        # Token refreshes go through a plain session: one that adds the token itself would recurse.
        self._refresh_session = requests.Session()
        self._session = AuthorizedSession(  # type: ignore[no-untyped-call]
            self._credentials, refresh_timeout=transport.timeout, auth_request=Request(self._refresh_session)
        )
        pooled = HTTPAdapter(pool_connections=1, pool_maxsize=POOL_SIZE)
        self._session.mount("https://", pooled)
        self._session.mount("http://", pooled)

    # -- the account -------------------------------------------------------------------------------------
    def resolve(self) -> str:
        """The service account's email. Metadata-server credentials name it only once refreshed: the first
        call refreshes them (retried like any request; a failure raises the vendor error).
        """
        with self._lock:
            if self._email != UNRESOLVED_EMAIL:
                return self._email
            request = Request(self._refresh_session)
            self._transport.retrying(lambda: self._credentials.refresh(request))  # type: ignore[no-untyped-call]
            email = service_account_of(self._credentials)
            if email is None or email == UNRESOLVED_EMAIL:
                raise auth_exceptions.RefreshError(  # type: ignore[no-untyped-call]
                    "the credentials did not name their service account after a refresh"
                )
            self._email = email
            return email

    def refused(self) -> bool:
        """True while IAM's last refusal is recent: no call is made then."""
        with self._lock:
            if self._refused_until is None:
                return False
            if self._clock() < self._refused_until:
                return True
            self._refused_until = None
            return False

    # -- signing -----------------------------------------------------------------------------------------
    def sign_bytes(self, message: bytes) -> bytes:
        """``message`` signed (RSA SHA-256 PKCS#1 v1.5) by one of the account's keys, through ``signBlob``.

        Raises :class:`SigningRefused` when IAM refuses (or refused lately: no call is made then), the vendor
        error when it cannot be reached.
        """
        if self.refused():  # e.g. the rest of a batch, once one call was refused
            raise SigningRefused("IAM refused to sign lately")
        email = self.resolve()
        url = f"{self.endpoint}/v1/projects/-/serviceAccounts/{quote(email, safe='@')}:signBlob"
        body = {"payload": base64.b64encode(message).decode("ascii")}
        try:
            response = self._transport.retrying(lambda: self._post(url, body))
        except HttpError as exc:
            if is_transient(exc):
                raise
            self._refuse(email, exc)
            raise SigningRefused(f"IAM refused to sign as {email}: {describe(exc)}") from exc
        try:
            return base64.b64decode(response.json()["signedBlob"], validate=True)
        except (ValueError, KeyError, TypeError) as exc:
            raise auth_exceptions.GoogleAuthError(  # type: ignore[no-untyped-call]
                f"the IAM Credentials API answered signBlob without a signature ({exc!r})"
            ) from exc

    def _post(self, url: str, body: dict[str, Any]) -> requests.Response:
        response = self._session.post(url, json=body, timeout=self._transport.timeout)
        if response.status_code != 200:
            response.close()
            raise HttpError(response)
        return response

    def _refuse(self, email: str, exc: HttpError) -> None:
        with self._lock:
            now = self._clock()
            first = self._refused_until is None or now >= self._refused_until
            self._refused_until = now + REFUSAL_PAUSE_SECONDS
        if first:  # concurrent calls refused together say it once
            log.error(
                "IAM refused to sign URLs as service account %s (%s): grant that account "
                "roles/iam.serviceAccountTokenCreator on itself, and give a VM the cloud-platform access "
                "scope. Entries are served through this server meanwhile; signing is tried again in %g s.",
                email,
                describe(exc),
                REFUSAL_PAUSE_SECONDS,
            )

    # -- google.auth's Signing and crypt.Signer, for google-cloud-storage --------------------------------
    @property
    def signer_email(self) -> str:
        return self.resolve()

    @property
    def signer(self) -> IamSigner:
        return self

    @property
    def key_id(self) -> str | None:
        return None  # IAM picks one of the account's keys

    def sign(self, message: str | bytes) -> bytes:
        return self.sign_bytes(message.encode("utf-8") if isinstance(message, str) else message)

    def close(self) -> None:
        self._session.close()  # type: ignore[no-untyped-call]
        self._refresh_session.close()
