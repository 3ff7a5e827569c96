"""Bearer tokens and roles: read < write < admin, and the namespaces a token may use.

A token is ``xlc_<id>_<secret>``: the id is public (it names the token in listings and finds its row), the
secret has 256 bits of randomness. Only the SHA-256 of the whole token is stored, and a presented token is
compared with it in constant time. No HTTP here: failures are :class:`~cache_server.errors.Unauthorized`
and :class:`~cache_server.errors.Forbidden`.

A read or write token may be limited to namespace patterns (``torch_xla-2.7.0-*``: ``*`` stands for any run of
characters, ``?`` for one); it then reaches only the namespaces they match, and none of the server-wide views
(metrics, dashboard) that name every namespace. Admin tokens are never limited.
"""

from __future__ import annotations

import datetime as dt
import enum
import fnmatch
import hashlib
import hmac
import re
import secrets
import threading
from dataclasses import dataclass

from cache_server.domain import Clock, TokenInfo, utcnow
from cache_server.errors import BadRequest, Forbidden, Unauthorized
from cache_server.index.tokens import TokenRepository

__all__ = ["Principal", "Role", "TokenInfo", "TokenManager", "check_patterns", "hash_token"]

TOKEN_PREFIX = "xlc"
_TOKEN = re.compile(r"xlc_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
_PATTERN = re.compile(r"[A-Za-z0-9._*?-]{1,128}")
MAX_PATTERNS = 32
_NO_MATCH = hashlib.sha256(b"no such token").hexdigest()
TOUCH_EVERY = dt.timedelta(seconds=60)  # last_used_at is written at most this often per token and process


class Role(enum.IntEnum):
    """What a token may do; each role includes the ones below it."""

    READ = 1
    WRITE = 2
    ADMIN = 3

    @classmethod
    def parse(cls, value: str) -> Role:
        """``"read"``, ``"write"`` or ``"admin"``."""
        try:
            return cls[value.strip().upper()]
        except KeyError:
            raise BadRequest(f"Unknown role {value!r}: use read, write or admin.") from None

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Principal:
    """Who is asking: the token's id, name and role."""

    token_id: str
    name: str
    role: Role
    namespaces: tuple[str, ...] | None = None  # the patterns it is limited to; None: every namespace
    metrics_off: bool = False  # its run reports add nothing to the xla_cache_run_* counters

    def may_use(self, namespace: str) -> bool:
        """Whether this token reaches ``namespace``."""
        return self.namespaces is None or any(fnmatch.fnmatchcase(namespace, p) for p in self.namespaces)


def check_patterns(patterns: list[str] | tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Namespace patterns as stored (sorted, without repeats); :class:`BadRequest` for a bad one."""
    if patterns is None:
        return None
    if not patterns:
        raise BadRequest("Give at least one namespace pattern, or none to allow every namespace.")
    if len(patterns) > MAX_PATTERNS:
        raise BadRequest(f"A token takes at most {MAX_PATTERNS} namespace patterns, not {len(patterns)}.")
    for pattern in patterns:
        if not _PATTERN.fullmatch(pattern):
            raise BadRequest(
                f"The namespace pattern {pattern!r} is not allowed: use the characters of namespace names "
                "(letters, digits, '.', '_', '-') with '*' for any run of them and '?' for one (at most 128)."
            )
    return tuple(sorted(set(patterns)))


def hash_token(token: str) -> str:
    """The stored form of a token: SHA-256 hex (enough for a 256-bit random secret)."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenManager:
    """Creates, lists, revokes and checks tokens."""

    def __init__(self, repository: TokenRepository, clock: Clock = utcnow) -> None:
        self._repository = repository
        self._clock = clock
        self._touched: dict[str, dt.datetime] = {}
        self._lock = threading.Lock()

    def create(
        self, name: str, role: Role, namespaces: list[str] | tuple[str, ...] | None = None
    ) -> tuple[str, TokenInfo]:
        """A new token for ``name`` with ``role``, limited to the ``namespaces`` patterns if given.

        The token itself is returned here and never again.
        """
        scope = check_patterns(namespaces)
        if scope is not None and role is Role.ADMIN:
            raise BadRequest(
                "An admin token reaches the whole server; only read and write tokens take patterns."
            )
        if not _NAME.fullmatch(name):
            raise BadRequest(
                f"The token name {name!r} is not allowed: start with a letter or digit, then letters, "
                "digits, '.', '_', '@' or '-' (at most 128)."
            )
        if self._repository.has_active_token_named(name):
            raise BadRequest(f"An active token named {name!r} exists; revoke it first or pick another name.")
        token_id = secrets.token_hex(6)
        token = f"{TOKEN_PREFIX}_{token_id}_{secrets.token_urlsafe(32)}"
        info = self._repository.add_token(
            token_id=token_id,
            name=name,
            role=role.label,
            token_sha256=hash_token(token),
            now=self._clock(),
            namespaces=scope,
        )
        return token, info

    def list_tokens(self) -> list[TokenInfo]:
        """Every token, revoked ones included."""
        return self._repository.list_tokens()

    def find(self, name_or_id: str) -> list[TokenInfo]:
        """The tokens with this id or name, revoked ones included."""
        return self._repository.find_tokens(name_or_id)

    def revoke(self, name_or_id: str) -> list[TokenInfo]:
        """Revoke the active tokens with this name (or this id); returns what was revoked."""
        return self._repository.revoke_tokens(name_or_id, now=self._clock())

    def set_metrics(self, name_or_id: str, *, on: bool) -> list[TokenInfo]:
        """Count the run reports of the active tokens with this name (or id) in the run metrics, or not
        (their runs are stored either way); returns the tokens changed."""
        return self._repository.set_metrics_off(name_or_id, not on)

    def authenticate(self, token: str | None) -> Principal:
        """The principal a presented token stands for; :class:`Unauthorized` unless it is valid."""
        if not token:
            raise Unauthorized(
                "This server requires a token: send 'Authorization: Bearer <token>' "
                "(an admin creates one with 'xla-cache-server token create')."
            )
        match = _TOKEN.fullmatch(token.strip())
        found = self._repository.get_token(match.group(1)) if match else None
        # Compare even when there is no row, so a wrong id costs the same as a wrong secret.
        same = hmac.compare_digest(hash_token(token.strip()), found[1] if found else _NO_MATCH)
        if found is None or not same:
            raise Unauthorized("The token is not valid.")
        info = found[0]
        if info.revoked_at is not None:
            raise Unauthorized(f"The token {info.name!r} ({info.id}) was revoked.")
        self._touch(info.id)
        return Principal(
            token_id=info.id,
            name=info.name,
            role=Role.parse(info.role),
            namespaces=info.namespaces,
            metrics_off=info.metrics_off,
        )

    @staticmethod
    def authorize(principal: Principal, needed: Role, action: str) -> None:
        """:class:`Forbidden` unless the principal's role is at least ``needed``."""
        if principal.role < needed:
            raise Forbidden(
                f"The token {principal.name!r} has the {principal.role.label} role; {action} needs "
                f"the {needed.label} role."
            )

    @staticmethod
    def authorize_namespace(principal: Principal, namespace: str | None, action: str) -> None:
        """:class:`Forbidden` unless the principal reaches ``namespace`` (None: a server-wide view)."""
        if principal.namespaces is None:
            return
        patterns = ", ".join(principal.namespaces)
        if namespace is None:
            raise Forbidden(
                f"The token {principal.name!r} is limited to namespaces ({patterns}); {action} shows every "
                "namespace and needs a token without that limit."
            )
        if not principal.may_use(namespace):
            raise Forbidden(
                f"The token {principal.name!r} is limited to namespaces matching {patterns}; "
                f"{namespace!r} is not one of them."
            )

    def _touch(self, token_id: str) -> None:
        now = self._clock()
        with self._lock:
            last = self._touched.get(token_id)
            if last is not None and now - last < TOUCH_EVERY:
                return
            self._touched[token_id] = now
        self._repository.touch_token(token_id, now)

    def is_active(self, token_id: str) -> bool:
        """Whether the token with this id exists and is not revoked (one read of its row): what an upload in
        flight asks (:mod:`cache_server.auth.revocation`)."""
        found = self._repository.get_token(token_id)
        return found is not None and found[0].revoked_at is None
