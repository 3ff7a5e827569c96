"""A real ``xla-cache-server serve`` with auth on over a fresh index of either kind, and the tokens a test
names, made in the index before the server starts."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cache_server.auth.tokens import Role, TokenManager
from cache_server.index import Database, TokenRepository
from cache_server.settings import Settings
from tests.support.databases import fresh_database_url
from tests.support.server import LiveServer, run_server

__all__ = ["Authed", "authed_server"]


@dataclass(frozen=True)
class Authed:
    """A running server, the environment it was started with, each token's secret by name, and the settings
    its processes read (where its data and slots are)."""

    server: LiveServer
    env: dict[str, str]
    tokens: dict[str, str]
    settings: Settings


@contextmanager
def authed_server(
    kind: str,
    tmp_path: Path,
    env: Mapping[str, str],
    tokens: Mapping[str, tuple[Role, Sequence[str] | None]],
    *,
    workers: int = 1,
) -> Iterator[Authed]:
    """A server of ``workers`` processes over a fresh ``kind`` index (``sqlite`` or ``postgresql``) with
    auth on; ``tokens`` maps a name to its role and namespace patterns (None: every namespace)."""
    with fresh_database_url(kind, tmp_path, at_head=True) as url:
        settings = Settings(data_dir=tmp_path / "data", database_url=url, auth=True)
        database = Database.from_settings(settings)
        manager = TokenManager(TokenRepository(database))
        secrets = {
            name: manager.create(name, role, None if patterns is None else list(patterns))[0]
            for name, (role, patterns) in tokens.items()
        }
        database.dispose()
        full = {
            **env,
            "XLA_CACHE_AUTH": "on",
            "XLA_CACHE_DATABASE_URL": url,
            "XLA_CACHE_DATA_DIR": str(tmp_path / "data"),
        }
        with run_server(tmp_path / "data", full, workers=workers) as server:
            yield Authed(server, full, secrets, settings)
