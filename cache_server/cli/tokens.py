"""``xla-cache-server token create|list|revoke|purge``: bearer tokens for ``XLA_CACHE_AUTH=on``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from cache_server.settings import Settings

if TYPE_CHECKING:  # imported when a command runs: the CLI starts (and ``serve`` spawns) faster without them
    from cache_server.auth.tokens import TokenInfo, TokenManager

__all__ = ["add_token_commands"]


@contextmanager
def _tokens(settings: Settings) -> Iterator[TokenManager]:
    from cache_server.auth.tokens import TokenManager
    from cache_server.index import Database, TokenRepository

    if settings.uses_embedded_sqlite:
        from cache_server.index.migrate import upgrade

        upgrade(settings)  # like serve: the embedded index migrates itself
    database = Database.from_settings(settings)
    try:
        yield TokenManager(TokenRepository(database))
    finally:
        database.dispose()


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def _as_json(info: TokenInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "name": info.name,
        "role": info.role,
        "namespaces": list(info.namespaces) if info.namespaces is not None else None,
        "created_at": info.created_at.isoformat(),
        "last_used_at": info.last_used_at.isoformat() if info.last_used_at else None,
        "revoked_at": info.revoked_at.isoformat() if info.revoked_at else None,
        "metrics_off": info.metrics_off,
    }


def _guarded(command: Callable[[argparse.Namespace, Settings], int]) -> Callable[..., int]:
    def run(args: argparse.Namespace, settings: Settings) -> int:
        from cache_server.errors import CacheError

        try:
            return command(args, settings)
        except CacheError as exc:
            print(f"error: {exc.detail}", file=sys.stderr)
            return 1

    return run


def _create(args: argparse.Namespace, settings: Settings) -> int:
    from cache_server.auth.tokens import Role

    with _tokens(settings) as tokens:
        token, info = tokens.create(args.name, Role.parse(args.role), args.namespace)
    print(token)
    limited = f", namespaces {', '.join(info.namespaces)}" if info.namespaces is not None else ""
    print(
        f"created token {info.name!r} (id {info.id}, role {info.role}{limited}). It is shown only this once: "
        "give it to its user now (clients read XLA_CACHE_TOKEN; the dashboard at / asks for it in a form).",
        file=sys.stderr,
    )
    if not settings.auth:
        print("note: XLA_CACHE_AUTH is off here, so the server does not ask for tokens yet.", file=sys.stderr)
    return 0


def _list(args: argparse.Namespace, settings: Settings) -> int:
    with _tokens(settings) as tokens:
        infos = tokens.list_tokens()
    if args.json:
        print(json.dumps([_as_json(info) for info in infos], indent=2))
        return 0
    rows = [("ID", "NAME", "ROLE", "NAMESPACES", "CREATED (UTC)", "LAST USED (UTC)", "REVOKED (UTC)")]
    rows += [
        (
            i.id,
            i.name,
            i.role,
            ",".join(i.namespaces) if i.namespaces is not None else "any",
            _when(i.created_at),
            _when(i.last_used_at),
            _when(i.revoked_at),
        )
        for i in infos
    ]
    widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if not infos:
        print("(no tokens yet: xla-cache-server token create --name NAME --role read|write|admin)")
    return 0


def _revoke(args: argparse.Namespace, settings: Settings) -> int:
    with _tokens(settings) as tokens:
        revoked = tokens.revoke(args.token)
    if not revoked:
        print(f"error: no active token named {args.token!r} or with that id.", file=sys.stderr)
        return 1
    for info in revoked:
        print(f"revoked token {info.name!r} (id {info.id}, role {info.role})")
    return 0


def _metrics(args: argparse.Namespace, settings: Settings) -> int:
    with _tokens(settings) as tokens:
        changed = tokens.set_metrics(args.token, on=args.state == "on")
    if not changed:
        print(f"error: no active token named {args.token!r} or with that id.", file=sys.stderr)
        return 1
    for info in changed:
        counted = "not counted in" if info.metrics_off else "counted in"
        print(f"token {info.name!r} (id {info.id}): its run reports are {counted} the run metrics")
    return 0


def _purge(args: argparse.Namespace, settings: Settings) -> int:
    from cache_server.index.migrate import upgrade
    from cache_server.wiring import build_services

    if settings.uses_embedded_sqlite:
        upgrade(settings)
    services = build_services(settings)
    try:
        result = services.admin.purge_token(args.token, revoke=not args.keep_token, dry_run=args.dry_run)
    finally:
        services.stop()
    removed = result.removed
    revoked_now = {info.id for info in result.revoked}
    for info in result.tokens:
        state = "revoked now" if info.id in revoked_now else ("revoked" if info.revoked_at else "active")
        print(f"token {info.name!r} (id {info.id}, role {info.role}): {state}")
    verb = "would remove" if removed.dry_run else "removed"
    print(f"{verb} {removed.evicted} entries ({removed.freed_bytes} bytes) it stored")
    return 0


def add_token_commands(sub: Any) -> None:
    """Add ``token create|list|revoke`` to the server CLI's subcommands."""
    token = sub.add_parser("token", help="create, list and revoke bearer tokens (roles read < write < admin)")
    actions = token.add_subparsers(dest="token_command", required=True)
    create = actions.add_parser("create", help="create a token and print it (once)")
    create.add_argument("--name", required=True, help="who or what uses it, e.g. ci or alice")
    create.add_argument("--role", required=True, choices=["read", "write", "admin"], help="what it may do")
    create.add_argument(
        "--namespace",
        action="append",
        metavar="PATTERN",
        help="limit it to namespaces matching this pattern ('*' any run of characters, '?' one); repeatable",
    )
    create.set_defaults(func=_guarded(_create))
    listing = actions.add_parser("list", help="list tokens (never their secrets)")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(func=_guarded(_list))
    revoke = actions.add_parser("revoke", help="revoke the active token with this name (or id)")
    revoke.add_argument("token", metavar="NAME_OR_ID")
    revoke.set_defaults(func=_guarded(_revoke))
    metrics = actions.add_parser(
        "metrics",
        help="count the token's run reports in the xla_cache_run_* metrics (on, the default) or not (off: "
        "they are still stored and listed)",
    )
    metrics.add_argument("token", metavar="NAME_OR_ID")
    metrics.add_argument("state", choices=["on", "off"])
    metrics.set_defaults(func=_guarded(_metrics))
    purge = actions.add_parser(
        "purge", help="revoke a token and remove every entry it stored (the answer to a leaked token)"
    )
    purge.add_argument("token", metavar="NAME_OR_ID")
    purge.add_argument("--dry-run", action="store_true", help="count what would go; change nothing")
    purge.add_argument("--keep-token", action="store_true", help="remove its entries but do not revoke it")
    purge.set_defaults(func=_guarded(_purge))
