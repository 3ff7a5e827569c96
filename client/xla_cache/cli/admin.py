"""The admin subcommands of ``xla-cache``: stats, evict, tokens, token-metrics, quota, purge-token and
delete-namespace, and their part of the argument parser (:func:`add_admin_commands`, called by
:func:`xla_cache.cli.build_parser`).

Printing is in :mod:`xla_cache.cli.admin_text`; the arguments and helpers every subcommand shares are in
:mod:`xla_cache.cli.common`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from xla_cache.cli.admin_text import (
    evict_lines,
    format_bytes,
    jobs_lines,
    lookup_line,
    parse_duration,
    parse_size,
    purge_lines,
    quota_lines,
    stats_lines,
    token_lines,
)
from xla_cache.cli.common import (
    add_common,
    add_runtime,
    admin_api,
    config_of,
    emit,
    eviction_counts,
    namespace_name,
    namespace_of,
    no_namespace_help,
    remove_in_rounds,
)
from xla_cache.cli.signing import signer_lines
from xla_cache.errors import ClientError, ServerProblem, ServerUnavailable
from xla_cache.http.deadline import Deadline

__all__ = [
    "add_admin_commands",
    "cmd_delete_namespace",
    "cmd_evict",
    "cmd_purge_token",
    "cmd_quota",
    "cmd_stats",
    "cmd_token_metrics",
    "cmd_tokens",
]


def cmd_stats(args: argparse.Namespace) -> int:
    """The namespace's entries, bytes and counters on the server, and the server's totals if allowed.

    The namespace: ``--namespace``, else this runtime's with ``--runtime``, else the one the last warm here
    recorded (the line says which); with ``--all``, or when none is known, only the server-wide part.
    """
    config = config_of(args)
    chosen = None if args.all else namespace_of(args, config)
    namespace = chosen.name if chosen is not None else None
    with admin_api(config) as api:
        info = api.get_namespace(namespace, Deadline(args.timeout)) if namespace else {}
        totals: dict[str, Any] | None
        admin_error: str | None
        signers: list[dict[str, Any]] = []
        own: dict[str, Any] | None = None  # the namespace's own jobs' numbers
        try:
            totals = api.admin_stats(Deadline(args.timeout), limit=args.limit, after=args.after)
            signers = api.admin_signers(Deadline(args.timeout))["signers"]
            if namespace:
                own = api.admin_stats(Deadline(args.timeout), namespace=namespace, limit=1, top=0).get("jobs")
        except ServerUnavailable:
            raise  # the server could not be reached at all: say so, as every command does
        except ServerProblem as exc:
            totals = None
            admin_error = exc.reason
        else:
            admin_error = None
    data: dict[str, Any] = {
        "namespace": info,
        "namespace_jobs": own,
        "admin": totals,
        "admin_error": admin_error,
        "signers": signers,
    }
    if chosen is not None:
        lines = [f"namespace  {chosen.name} ({chosen.how})"]
    else:
        lines = [] if args.all else [f"namespace  none: {no_namespace_help(config)}"]
    if info:
        lines.append(
            f"  stored       {info.get('entries', 0):,} entries, {format_bytes(info.get('bytes', 0))}"
        )
        if totals is not None:
            lines += jobs_lines(own)
        if "hits" in info:
            lines.append(lookup_line(info))
        lines += [
            f"  {key:<12} {info[key]}" for key in ("uploads", "created_at", "last_used_at") if key in info
        ]
    if totals is not None:
        lines += stats_lines(totals)
        lines += ["entries per signer (unsigned: no signature; xla-cache unsigned --remove)"]
        lines += signer_lines(signers)
    else:
        lines.append(f"server totals unavailable ({admin_error})")
    emit(args, data, lines)
    return 0 if totals is not None or namespace else 1


def cmd_evict(args: argparse.Namespace) -> int:
    """Evict least recently used entries on the server (``--dry-run`` lists what would go)."""
    body: dict[str, Any] = {"dry_run": args.dry_run, "namespace": args.namespace}
    try:
        if args.max_total_bytes is not None:
            body["max_total_bytes"] = parse_size(args.max_total_bytes)
        if args.older_than is not None:
            body["older_than_seconds"] = parse_duration(args.older_than)
    except ValueError as exc:
        raise ClientError(str(exc)) from None
    config = config_of(args)
    with admin_api(config) as api:
        result = api.admin_evict(body, Deadline(args.timeout))
    emit(args, result, evict_lines(result))
    return 0


def cmd_tokens(args: argparse.Namespace) -> int:
    """Every token, its role and namespace patterns, and the entries it stored (admin token)."""
    config = config_of(args)
    with admin_api(config) as api:
        listing = api.admin_tokens(Deadline(args.timeout))
    emit(args, listing, token_lines(listing))
    return 0


def cmd_quota(args: argparse.Namespace) -> int:
    """List the quotas, or set (``--clear``: remove) a namespace's or a token's (admin token)."""
    config = config_of(args)
    with admin_api(config) as api:
        if args.namespace is None and args.token_name is None:
            result = api.admin_quotas(Deadline(args.timeout))
        else:
            body: dict[str, Any] = {"max_entries": None, "max_bytes": None}
            if not args.clear:
                if args.max_entries is None and args.max_bytes is None:
                    print("xla-cache quota: give --max-entries, --max-bytes or --clear", file=sys.stderr)
                    return 2
                body["max_entries"] = args.max_entries
                try:
                    body["max_bytes"] = parse_size(args.max_bytes) if args.max_bytes is not None else None
                except ValueError as exc:
                    print(f"xla-cache quota: --max-bytes: {exc}", file=sys.stderr)
                    return 2
            kind, subject = ("namespace", args.namespace) if args.namespace else ("token", args.token_name)
            answer = api.admin_set_quota(kind, subject, body, Deadline(args.timeout))
            result = answer if "quotas" in answer else {"quotas": [answer]}
    emit(args, result, quota_lines(result["quotas"]))
    return 0


def cmd_purge_token(args: argparse.Namespace) -> int:
    """Revoke a token and remove every entry it stored, REMOVAL_ROUND entries a call until none remain
    (``--dry-run`` lists what would go). The first call names the token as given and revokes it; the later
    ones name the ids it matched, so a new token given the same name meanwhile is neither revoked nor purged.
    Exit code 1 when entries remain (stored meanwhile under ``--keep-token``)."""
    body: dict[str, Any] = {"dry_run": args.dry_run, "revoke": not args.keep_token}
    config = config_of(args)
    with admin_api(config) as api:
        if args.dry_run:
            result = api.admin_purge_token(args.token_name, body, Deadline(args.timeout))
            emit(args, result, purge_lines(result))
            return 0
        answers: list[dict[str, Any]] = []

        def call(most: int) -> dict[str, Any]:
            if not answers:  # the first call: the name as given, revoked as asked
                answers.append(
                    api.admin_purge_token(
                        args.token_name, {**body, "max_entries": most}, Deadline(args.timeout)
                    )
                )
                return answers[0]
            total = {"evicted": 0, "freed_bytes": 0, "remaining": 0}
            for token in answers[0]["tokens"]:  # the ones the first call matched, by id; none revoked again
                part = api.admin_purge_token(
                    token["id"], {"revoke": False, "max_entries": most}, Deadline(args.timeout)
                )["removed"]
                total = {name: total[name] + (part.get(name) or 0) for name in total}
            return {"removed": total}

        removed = remove_in_rounds(call, lambda answer: eviction_counts(answer["removed"]))
        first = answers[0]
        result = {"tokens": first["tokens"], "revoked": first["revoked"], "removed": removed.as_eviction()}
    emit(args, result, purge_lines(result))
    return 1 if removed.remaining else 0


def cmd_token_metrics(args: argparse.Namespace) -> int:
    """Count a token's run reports in the server's run metrics, or not (its runs are stored either way)."""
    config = config_of(args)
    with admin_api(config) as api:
        result = api.admin_token_metrics(args.token_name, args.state == "on", Deadline(args.timeout))
    how = "count in" if args.state == "on" else "are stored and add nothing to"
    lines = [
        f"token {t['name']} ({t['id']}): its run reports {how} the run metrics" for t in result["tokens"]
    ]
    emit(args, result, lines)
    return 0


def cmd_delete_namespace(args: argparse.Namespace) -> int:
    """Remove a namespace and every entry in it, REMOVAL_ROUND entries a call until none remain
    (``--dry-run`` says what it holds). Exit code 1 when entries remain (stored meanwhile)."""
    config = config_of(args)
    with admin_api(config) as api:
        if args.dry_run:
            info = api.get_namespace(args.namespace, Deadline(args.timeout))
            entries, size = int(info["entries"]), int(info["bytes"])
            result = {
                "namespace": args.namespace,
                "dry_run": True,
                "deleted_entries": entries,
                "freed_bytes": size,
                "remaining": entries,
            }
            emit(
                args,
                result,
                [
                    f"dry run: would delete namespace {args.namespace} with {entries:,} entries, "
                    f"{format_bytes(size)} (nothing was removed)"
                ],
            )
            return 0
        removed = remove_in_rounds(
            lambda most: api.admin_delete_namespace(args.namespace, most, Deadline(args.timeout)),
            lambda part: (part["deleted_entries"], part["freed_bytes"], part.get("remaining")),
        )
    result = {
        "namespace": args.namespace,
        "dry_run": False,
        "deleted_entries": removed.entries,
        "freed_bytes": removed.freed_bytes,
        "remaining": removed.remaining,
    }
    freed = format_bytes(removed.freed_bytes)
    if removed.remaining:
        line = (
            f"namespace {args.namespace}: removed {removed.entries:,} entries, freed {freed}; "
            f"{removed.remaining:,} more arrived while it ran and remain (and the namespace with them): "
            "run it again to remove them"
        )
    else:
        line = f"deleted namespace {args.namespace}: {removed.entries:,} entries, freed {freed}"
    emit(args, result, [line])
    return 1 if removed.remaining else 0


def add_admin_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register stats, evict, tokens, purge-token, delete-namespace and quota on the subparsers."""
    stats = sub.add_parser("stats", help="the namespace's entries and counters, and server totals")
    add_common(stats, timeout=30.0)
    stats.add_argument(
        "--namespace", type=namespace_name, help="namespace (default: the one the last warm here recorded)"
    )
    add_runtime(stats)
    stats.add_argument("--all", action="store_true", help="only the server-wide stats (no namespace)")
    stats.add_argument("--limit", type=int, help="namespaces listed (a page; default: the server's, 100)")
    stats.add_argument("--after", metavar="CURSOR", help="the next page of namespaces (the page says)")
    stats.set_defaults(func=cmd_stats)

    evict = sub.add_parser(
        "evict",
        help="evict least recently used entries on the server (admin token)",
        description="With no limit given, the server applies its configured budgets.",
    )
    add_common(evict, timeout=600.0)
    evict.add_argument("--max-total-bytes", metavar="SIZE", help="keep at most this much, e.g. 500G or 10GiB")
    evict.add_argument(
        "--older-than", metavar="AGE", help="evict entries unused for this long, e.g. 30d or 12h"
    )
    evict.add_argument(
        "--namespace", type=namespace_name, help="only this namespace (the size limit is then its own)"
    )
    evict.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
    evict.set_defaults(func=cmd_evict)

    tokens = sub.add_parser("tokens", help="every token and what it stored (admin token)")
    add_common(tokens, timeout=30.0)
    tokens.set_defaults(func=cmd_tokens)

    purge = sub.add_parser(
        "purge-token",
        help="revoke a token and remove every entry it stored (admin token)",
        description="The answer to a leaked token: it is revoked first, then what it stored is removed.",
    )
    add_common(purge, timeout=600.0)
    purge.add_argument("token_name", metavar="NAME_OR_ID", help="the token's name or id (xla-cache tokens)")
    purge.add_argument("--dry-run", action="store_true", help="list what would go; revoke and remove nothing")
    purge.add_argument("--keep-token", action="store_true", help="remove its entries but do not revoke it")
    purge.set_defaults(func=cmd_purge_token)

    metrics = sub.add_parser(
        "token-metrics",
        help="count a token's run reports in the server's run metrics, or not (admin token)",
        description="off: the token's run reports are stored and shown, and add nothing to the "
        "xla_cache_run_* metrics (a test rig, an uploader whose numbers would distort the fleet's).",
    )
    add_common(metrics, timeout=30.0)
    metrics.add_argument("token_name", metavar="NAME_OR_ID", help="the token's name or id (xla-cache tokens)")
    metrics.add_argument("state", choices=("on", "off"), help="on: counted (the default); off: not counted")
    metrics.set_defaults(func=cmd_token_metrics)

    delete = sub.add_parser(
        "delete-namespace",
        help="remove a namespace and every entry in it (admin token)",
        description="Removes the entries a batch at a time, printing the progress, then the namespace; "
        "run it again to finish one cut short.",
    )
    add_common(delete, timeout=600.0)
    delete.add_argument("namespace", metavar="NAMESPACE", type=namespace_name, help="the namespace to delete")
    delete.add_argument(
        "--dry-run",
        action="store_true",
        help="say what it holds; remove nothing (a read token may ask this: it checks no admin rights)",
    )
    delete.set_defaults(func=cmd_delete_namespace)

    quota = sub.add_parser(
        "quota",
        help="list quotas, or set a namespace's or a token's (admin token)",
        description="Uploads past a quota are refused with 507 before anything of them is stored.",
    )
    add_common(quota, timeout=30.0)
    subject = quota.add_mutually_exclusive_group()
    subject.add_argument(
        "--namespace", type=namespace_name, help="set this namespace's quota (it need not exist yet)"
    )
    subject.add_argument(
        "--for-token",
        dest="token_name",
        metavar="NAME_OR_ID",
        help="set the quota of these tokens",
    )
    quota.add_argument("--max-entries", type=int, help="at most this many entries")
    quota.add_argument("--max-bytes", metavar="SIZE", help="at most this much, e.g. 500G or 10GiB")
    quota.add_argument("--clear", action="store_true", help="remove the quota")
    quota.set_defaults(func=cmd_quota)
