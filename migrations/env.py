"""Alembic environment: the database URL comes from the server's Settings (XLA_CACHE_DATABASE_URL)."""

from __future__ import annotations

from typing import Any

from alembic import context
from alembic.autogenerate.api import AutogenContext

from cache_server.index.database import make_engine
from cache_server.index.models import Base, UtcDateTime
from cache_server.settings import Settings

config = context.config
settings: Settings = config.attributes.get("settings") or Settings()
target_metadata = Base.metadata


def render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | bool:
    """Write our UTC column type as the plain DateTime(timezone=True) it stores."""
    if type_ == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def run_migrations_offline() -> None:
    context.configure(
        url=settings.resolved_database_url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        render_item=render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(settings)
    try:
        with engine.connect() as connection:
            if connection.dialect.name == "postgresql":
                # A migration may rightly take longer than the bound on a request (a backfill, an index over
                # every entry), and waits a while for the running servers' short transactions.
                connection.exec_driver_sql("SET statement_timeout = 0")
                connection.exec_driver_sql("SET lock_timeout = '120s'")
                connection.commit()  # session settings: they outlive this transaction
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=True,
                render_item=render_item,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
