"""Queries on bearer tokens (only their SHA-256 digests are stored)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import or_, select, update

from cache_server.index.models import ApiToken, utcnow
from cache_server.index.repository import IndexRepository

__all__ = ["TokenRepository"]


class TokenRepository(IndexRepository):
    """The ``api_tokens`` table."""

    def add_token(self, *, token_id: str, name: str, role: str, token_sha256: str) -> ApiToken:
        """Store a new token's digest."""
        token = ApiToken(id=token_id, name=name, role=role, token_sha256=token_sha256, created_at=utcnow())
        with self._tx() as session:
            session.add(token)
        return token

    def get_token(self, token_id: str) -> ApiToken | None:
        """The token with this public id, revoked or not."""
        with self._tx() as session:
            return session.get(ApiToken, token_id)

    def list_tokens(self) -> list[ApiToken]:
        """Every token, oldest first."""
        with self._tx() as session:
            return list(session.scalars(select(ApiToken).order_by(ApiToken.created_at, ApiToken.id)))

    def active_tokens_named(self, name: str) -> list[ApiToken]:
        """Tokens with this name that are not revoked."""
        with self._tx() as session:
            stmt = select(ApiToken).where(ApiToken.name == name, ApiToken.revoked_at.is_(None))
            return list(session.scalars(stmt))

    def revoke_tokens(self, name_or_id: str) -> list[ApiToken]:
        """Revoke the active tokens with this name or id; returns them."""
        now = utcnow()
        with self._tx() as session:
            stmt = (
                update(ApiToken)
                .where(or_(ApiToken.name == name_or_id, ApiToken.id == name_or_id))
                .where(ApiToken.revoked_at.is_(None))
                .values(revoked_at=now)
                .returning(ApiToken)
            )
            return list(session.scalars(stmt))

    def touch_token(self, token_id: str, when: dt.datetime) -> None:
        """Record that the token was used."""
        with self._tx() as session:
            session.execute(update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=when))
