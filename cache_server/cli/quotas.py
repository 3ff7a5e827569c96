"""``xla-cache-server quota set|list``: byte and entry quotas of namespaces and tokens
(:mod:`cache_server.service.quotas`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from cache_server.settings import Settings

if TYPE_CHECKING:  # imported when a command runs, as the token commands do
    from cache_server.auth.tokens import TokenManager
    from cache_server.service.quotas import QuotaRow, Quotas

__all__ = ["add_quota_commands"]


@contextmanager
def _quotas(settings: Settings) -> Iterator[tuple[Quotas, TokenManager]]:
    from cache_server.auth.tokens import TokenManager
    from cache_server.index import Database, TokenRepository
    from cache_server.index.quotas import QuotaRepository
    from cache_server.service.quotas import Quotas

    if settings.uses_embedded_sqlite:
        from cache_server.index.migrate import upgrade

        upgrade(settings)  # like serve: the embedded index migrates itself
    database = Database.from_settings(settings)
    try:
        yield (
            Quotas(QuotaRepository(database), settings.max_namespaces_per_token),
            TokenManager(TokenRepository(database)),
        )
    finally:
        database.dispose()


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def _print(rows: list[QuotaRow], as_json: bool) -> None:
    if as_json:
        print(json.dumps([vars(row) for row in rows], indent=2))
        return
    table = [("KIND", "SUBJECT", "ENTRIES", "MAX ENTRIES", "BYTES", "MAX BYTES")]
    table += [
        (r.kind, r.subject, str(r.entries), _limit(r.max_entries), str(r.bytes), _limit(r.max_bytes))
        for r in rows
    ]
    widths = [max(len(row[col]) for row in table) for col in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


def _set(args: argparse.Namespace, settings: Settings) -> int:
    from cache_server.errors import CacheError
    from cache_server.service.quotas import NAMESPACE, TOKEN

    limits = {"max_entries": args.max_entries, "max_bytes": args.max_bytes}
    if args.clear:
        limits = {"max_entries": None, "max_bytes": None}
    elif args.max_entries is None and args.max_bytes is None:
        print("error: give --max-entries, --max-bytes or both (or --clear).", file=sys.stderr)
        return 2
    try:
        with _quotas(settings) as (quotas, tokens):
            if args.namespace is not None:
                rows = [quotas.set_quota(NAMESPACE, args.namespace, **limits)]
            else:
                found = tokens.find(args.token)
                if not found:
                    print(f"error: no token has the name or id {args.token!r}.", file=sys.stderr)
                    return 1
                rows = [quotas.set_quota(TOKEN, info.id, **limits) for info in found]
    except CacheError as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return 1
    _print(rows, args.json)
    return 0


def _list(args: argparse.Namespace, settings: Settings) -> int:
    with _quotas(settings) as (quotas, _tokens):
        rows = quotas.quotas()
    _print(rows, args.json)
    if not rows and not args.json:
        print("(no quotas: xla-cache-server quota set --namespace NAME --max-entries N --max-bytes N)")
    return 0


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def add_quota_commands(sub: Any) -> None:
    """Add ``quota set|list`` to the server CLI's subcommands."""
    quota = sub.add_parser(
        "quota", help="byte and entry quotas of namespaces and tokens (uploads past one get 507)"
    )
    actions = quota.add_subparsers(dest="quota_command", required=True)
    setting = actions.add_parser("set", help="set (or with --clear remove) a namespace's or a token's quota")
    subject = setting.add_mutually_exclusive_group(required=True)
    subject.add_argument("--namespace", help="the namespace (it need not exist yet)")
    subject.add_argument("--token", metavar="NAME_OR_ID", help="the tokens with this name or id")
    setting.add_argument("--max-entries", type=_count, help="at most this many entries")
    setting.add_argument("--max-bytes", type=_count, help="at most this many bytes")
    setting.add_argument("--clear", action="store_true", help="remove the quota")
    setting.add_argument("--json", action="store_true", help="machine-readable output")
    setting.set_defaults(func=_set)
    listing = actions.add_parser("list", help="every quota, with what its subject stores now")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(func=_list)
