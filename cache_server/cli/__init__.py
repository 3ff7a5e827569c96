"""``xla-cache-server``, the server's command line: this module holds the parser, ``serve``, ``migrate`` and
``reindex``; :mod:`.tokens` the ``token`` commands, :mod:`.quotas` the ``quota`` commands, and :mod:`.serve`
how uvicorn runs the app (a header read timeout; the one line saying where the dashboard is)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from cache_server.cli.quotas import add_quota_commands
from cache_server.cli.tokens import add_token_commands
from cache_server.settings import Settings

__all__ = ["main"]

log = logging.getLogger("cache_server.cli")


def _is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine (an empty host means every interface)."""
    if host == "localhost":
        return True
    if not host.strip():
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(
                ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(host, None)
            )
        except OSError:
            return False


def _cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    if not _is_loopback(args.host) and not settings.auth and not args.insecure:
        print(
            f"error: refusing to listen on {args.host} with auth off: anyone who can reach it could read and "
            "overwrite the cache. Set XLA_CACHE_AUTH=on (and create tokens), or pass --insecure.",
            file=sys.stderr,
        )
        return 2
    if settings.uses_embedded_sqlite:
        from cache_server.index.migrate import upgrade

        upgrade(settings)
    from cache_server.cli.serve import log_config, protocol_factory, serve
    from cache_server.metrics import multiprocess_directory

    workers = settings.workers if args.workers is None else args.workers
    if workers < 1:
        print(f"error: --workers must be at least 1, not {workers}", file=sys.stderr)
        return 2
    os.environ["XLA_CACHE_WORKERS"] = str(workers)  # the workers' own settings: the manifest says it
    config = uvicorn.Config(
        "cache_server.app:create_app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=workers,
        log_level=settings.log_level,
        log_config=log_config(),  # uvicorn's, less the traceback of a response broken off on purpose
        proxy_headers=True,
        timeout_graceful_shutdown=30,
        access_log=False,  # the app logs each request as JSON, without query strings (tokens)
        # idle or trickling connections cannot pile up: docs/operating.md, "Running in production"
        http=protocol_factory(settings.header_timeout_seconds),
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=settings.keep_alive_seconds,
    )
    with multiprocess_directory(workers):  # several workers: one /metrics over all of them
        started = serve(config)
    return 0 if started else 3  # as uvicorn.run: 3 when it could not start


def _cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    from cache_server.index.migrate import downgrade, upgrade

    if args.revision == "base" or args.down:
        downgrade(settings, args.revision)
    else:
        upgrade(settings, args.revision)
    print(f"index at {args.revision}: {settings.resolved_database_url.split('@')[-1]}")
    return 0


def _cmd_reindex(args: argparse.Namespace, settings: Settings) -> int:
    from cache_server.admin.reindex import ReindexReport
    from cache_server.errors import CacheError
    from cache_server.index.migrate import upgrade
    from cache_server.wiring import build_services

    def progress(report: ReindexReport) -> None:
        log.info("reindex: %s so far", report.summary())

    try:
        upgrade(settings)  # a lost database comes back empty: give it the schema first
        services = build_services(settings)
        try:
            report = services.reindexer.run(verify=args.verify, dry_run=args.dry_run, progress=progress)
        finally:
            services.stop()
    except CacheError as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return 1
    for name, reason in sorted(report.skipped.items()):
        print(f"skipped {name}: {reason}")
    print(("dry run: " if args.dry_run else "") + report.summary())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xla-cache-server",
        description="Compilation-cache server for PyTorch/XLA. Settings come from XLA_CACHE_* variables.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP API under uvicorn")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    serve.add_argument(
        "--workers", type=int, default=None, help="uvicorn worker processes (default: XLA_CACHE_WORKERS or 1)"
    )
    serve.add_argument("--insecure", action="store_true", help="allow a non-loopback address with auth off")
    serve.set_defaults(func=_cmd_serve)
    migrate = sub.add_parser("migrate", help="bring the index to the newest schema (or --down to a revision)")
    migrate.add_argument("revision", nargs="?", default="head")
    migrate.add_argument("--down", action="store_true", help="downgrade to the given revision")
    migrate.set_defaults(func=_cmd_migrate)
    reindex = sub.add_parser(
        "reindex", help="rebuild lost index rows from the blob store's metadata (existing rows are kept)"
    )
    reindex.add_argument("--verify", action="store_true", help="hash every blob and leave out corrupt ones")
    reindex.add_argument("--dry-run", action="store_true", help="count what would be added, write nothing")
    reindex.set_defaults(func=_cmd_reindex)
    add_token_commands(sub)
    add_quota_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings()
    except ValidationError as exc:
        print(f"error: invalid XLA_CACHE_* setting:\n{exc}", file=sys.stderr)
        return 2
    # Alembic's lines (its plugins, "Context impl", each migration run) are for debugging: shown at the
    # debug log level only, so serve's start says what matters (where the dashboard is).
    logging.getLogger("alembic").setLevel(logging.DEBUG if settings.log_level == "debug" else logging.WARNING)
    result: int = args.func(args, settings)
    return result


if __name__ == "__main__":
    sys.exit(main())
