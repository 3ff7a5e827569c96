"""Bearer tokens: the ``api_tokens`` table (only each token's SHA-256 digest is stored)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import or_, select, update

from cache_server.domain import TokenInfo
from cache_server.index.database import Database
from cache_server.index.models import ApiToken

__all__ = ["TokenRepository"]


def _info(row: ApiToken) -> TokenInfo:
    namespaces = tuple(row.namespaces) if row.namespaces is not None else None
    return TokenInfo(
        row.id,
        row.name,
        row.role,
        row.created_at,
        row.last_used_at,
        row.revoked_at,
        namespaces,
        metrics_off=bool(row.metrics_off),
    )


class TokenRepository:
    """The ``api_tokens`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def add_token(
        self,
        *,
        token_id: str,
        name: str,
        role: str,
        token_sha256: str,
        now: dt.datetime,
        namespaces: tuple[str, ...] | None = None,
    ) -> TokenInfo:
        """Store a new token's digest (and the namespace patterns it is limited to, if any)."""
        row = ApiToken(
            id=token_id,
            name=name,
            role=role,
            token_sha256=token_sha256,
            created_at=now,
            namespaces=list(namespaces) if namespaces is not None else None,
        )
        with self._db.transaction() as session:
            session.add(row)
        return _info(row)

    def get_token(self, token_id: str) -> tuple[TokenInfo, str] | None:
        """The token with this public id, revoked or not, and its stored digest."""
        with self._db.transaction() as session:
            row = session.get(ApiToken, token_id)
            return (_info(row), row.token_sha256) if row is not None else None

    def list_tokens(self) -> list[TokenInfo]:
        """Every token, oldest first."""
        with self._db.transaction() as session:
            rows = session.scalars(select(ApiToken).order_by(ApiToken.created_at, ApiToken.id))
            return [_info(row) for row in rows]

    def has_active_token_named(self, name: str) -> bool:
        """Whether a token with this name is not revoked."""
        with self._db.transaction() as session:
            stmt = select(ApiToken.id).where(ApiToken.name == name, ApiToken.revoked_at.is_(None)).limit(1)
            return session.execute(stmt).first() is not None

    def find_tokens(self, name_or_id: str) -> list[TokenInfo]:
        """The tokens, revoked or not, with this id or this name."""
        with self._db.transaction() as session:
            stmt = select(ApiToken).where(or_(ApiToken.name == name_or_id, ApiToken.id == name_or_id))
            return [_info(row) for row in session.scalars(stmt.order_by(ApiToken.created_at, ApiToken.id))]

    def revoke_tokens(self, name_or_id: str, *, now: dt.datetime) -> list[TokenInfo]:
        """Revoke the active tokens with this name or id; returns them."""
        with self._db.transaction() as session:
            stmt = (
                update(ApiToken)
                .where(or_(ApiToken.name == name_or_id, ApiToken.id == name_or_id))
                .where(ApiToken.revoked_at.is_(None))
                .values(revoked_at=now)
                .returning(ApiToken)
            )
            return [_info(row) for row in session.scalars(stmt)]

    def set_metrics_off(self, name_or_id: str, off: bool) -> list[TokenInfo]:
        """Mark the active tokens with this name or id as counted in the run metrics or not; returns them."""
        with self._db.transaction() as session:
            stmt = (
                update(ApiToken)
                .where(or_(ApiToken.name == name_or_id, ApiToken.id == name_or_id))
                .where(ApiToken.revoked_at.is_(None))
                .values(metrics_off=off)
                .returning(ApiToken)
            )
            return [_info(row) for row in session.scalars(stmt)]

    def touch_token(self, token_id: str, when: dt.datetime) -> None:
        """Record that the token was used."""
        with self._db.transaction() as session:
            session.execute(update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=when))
