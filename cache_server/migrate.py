"""Alembic, driven from the same :class:`~cache_server.settings.Settings` as the server."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from cache_server.settings import Settings

__all__ = ["alembic_config", "downgrade", "script_location", "upgrade"]


def script_location() -> Path:
    """The migrations folder: ``migrations/`` in a checkout, ``cache_server/_migrations`` in a wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "migrations", here / "_migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError("The Alembic migrations folder is missing from this installation.")


def alembic_config(settings: Settings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    config.attributes["settings"] = settings
    return config


def upgrade(settings: Settings, revision: str = "head") -> None:
    """Bring the index to ``revision`` (the newest by default)."""
    command.upgrade(alembic_config(settings), revision)


def downgrade(settings: Settings, revision: str = "base") -> None:
    command.downgrade(alembic_config(settings), revision)
