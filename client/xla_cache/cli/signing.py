"""The signing subcommands of ``xla-cache``: ``keys create`` and ``keys show`` (local: a key pair, and what
a key's id is), ``signers`` (entries per signer on the server), ``purge-signer`` (a leaked key's entries
removed) and ``unsigned`` (the unsigned entries counted, or removed with ``--remove``); the last three need
an admin token. Registered by :func:`xla_cache.cli.build_parser` through :func:`add_signing_commands`.
"""

from __future__ import annotations

import argparse
import base64
import os
from pathlib import Path
from typing import Any

from cache_protocol.signing import (
    PRIVATE_PREFIX,
    PUBLIC_PREFIX,
    BadKey,
    Signer,
    parse_public_keys,
    read_key_texts,
)
from xla_cache.cli.admin_text import evict_lines, format_bytes
from xla_cache.cli.common import add_common, admin_api, config_of, emit, eviction_counts, remove_in_rounds
from xla_cache.config import SIGNING_KEY_ENV, ClientConfig
from xla_cache.errors import ClientError
from xla_cache.http.deadline import Deadline

__all__ = ["add_signing_commands", "signer_lines"]

UNSIGNED = "unsigned"


def cmd_keys_create(args: argparse.Namespace) -> int:
    """Write a new key pair: the signing key (mode 0600) and ``<file>.pub``; print the public key and id."""
    path = Path(args.out)
    if path.exists() and not args.force:
        raise ClientError(f"{path} exists; pass --force to replace it")
    signer = Signer.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{signer.private_text()}\n")
    public = path.with_name(path.name + ".pub")
    public.write_text(f"{signer.public_text()} {signer.key_id}\n")
    lines = [
        f"signing key  {path} (secret: give it to the jobs that upload, as {SIGNING_KEY_ENV})",
        f"public key   {public}",
        f"key id       {signer.key_id}",
        f"             {signer.public_text()}",
    ]
    emit(args, {"key_id": signer.key_id, "public_key": signer.public_text(), "file": str(path)}, lines)
    return 0


def cmd_keys_show(args: argparse.Namespace) -> int:
    """The key id and public key of a signing key or of public keys (a key, or a file of them)."""
    value = args.key or ClientConfig.resolve().signing_key  # else XLA_CACHE_SIGNING_KEY, else the config file
    if not value:
        raise ClientError(
            f"name a key or a key file, or set {SIGNING_KEY_ENV} (or signing_key in the config file)"
        )
    try:
        text = read_key_texts(value)
        if PRIVATE_PREFIX in text:
            signer = Signer.from_text(text)
            keys = {signer.key_id: signer.public_text()}
        else:
            keys = {
                kid: PUBLIC_PREFIX + base64.b64encode(raw).decode()
                for kid, raw in parse_public_keys(text).items()
            }
    except (OSError, BadKey, ValueError) as exc:
        raise ClientError(f"cannot read {value[:60]!r}: {exc}") from None
    emit(args, {"keys": keys}, [f"{kid}  {public}" for kid, public in keys.items()])
    return 0


def signer_lines(signers: list[dict[str, Any]]) -> list[str]:
    """Entries per signer, as ``xla-cache signers`` and ``stats`` print them."""
    return [
        f"  {s['signer'] or UNSIGNED:<16}  {s['entries']:>10,} entries  {format_bytes(s['bytes'])}"
        for s in signers
    ]


def cmd_signers(args: argparse.Namespace) -> int:
    """Entries and bytes per signer key id on the server (and the unsigned ones)."""
    config = config_of(args)
    with admin_api(config) as api:
        result = api.admin_signers(Deadline(args.timeout))
    emit(args, result, ["signers (key id; unsigned: no signature)", *signer_lines(result["signers"])])
    return 0


def _purge(args: argparse.Namespace, signer: str) -> int:
    config = config_of(args)
    with admin_api(config) as api:
        if args.dry_run:
            result = api.admin_purge_signer(signer, {"dry_run": True}, Deadline(args.timeout))
        else:
            result = remove_in_rounds(
                lambda most: api.admin_purge_signer(signer, {"max_entries": most}, Deadline(args.timeout)),
                eviction_counts,
            ).as_eviction()
    emit(args, result, evict_lines(result, verb="remove"))
    return 1 if result.get("remaining") else 0


def cmd_purge_signer(args: argparse.Namespace) -> int:
    """Remove every entry a (leaked) key signed; ``--dry-run`` lists what would go."""
    return _purge(args, args.key_id)


def cmd_unsigned(args: argparse.Namespace) -> int:
    """Count the unsigned entries; with ``--remove``, remove them (``--dry-run``: list what would go)."""
    if args.remove or args.dry_run:
        return _purge(args, UNSIGNED)
    config = config_of(args)
    with admin_api(config) as api:
        signers = api.admin_signers(Deadline(args.timeout))["signers"]
    row: dict[str, Any] = next((s for s in signers if s["signer"] is None), {"entries": 0, "bytes": 0})
    emit(args, row, [f"unsigned  {row['entries']:,} entries, {format_bytes(row['bytes'])}"])
    return 0


def add_signing_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register keys, signers, purge-signer and unsigned on ``xla-cache``'s subparsers."""
    keys = sub.add_parser("keys", help="make or inspect entry signing keys (Ed25519)")
    actions = keys.add_subparsers(dest="keys_command", required=True)
    create = actions.add_parser("create", help="write a new key pair and print its public key and id")
    create.add_argument(
        "out", metavar="FILE", help="the signing key's file (the public key goes to FILE.pub)"
    )
    create.add_argument("--force", action="store_true", help="replace FILE if it exists")
    create.add_argument("--json", action="store_true", help="print JSON")
    create.set_defaults(func=cmd_keys_create)
    show = actions.add_parser("show", help="the key id and public key of a key or key file")
    show.add_argument("key", nargs="?", help=f"a key or a key file (default: ${SIGNING_KEY_ENV})")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=cmd_keys_show)

    signers = sub.add_parser("signers", help="entries per signer key id on the server (admin token)")
    add_common(signers, timeout=60.0)
    signers.set_defaults(func=cmd_signers)

    purge = sub.add_parser(
        "purge-signer",
        help="remove every entry a signing key signed (admin token)",
        description="The answer to a leaked signing key: remove what it signed, and drop it from "
        "XLA_CACHE_TRUSTED_KEYS and XLA_CACHE_REQUIRE_SIGNATURES.",
    )
    add_common(purge, timeout=600.0)
    purge.add_argument("key_id", metavar="KEY_ID", help="the key id (xla-cache keys show, xla-cache signers)")
    purge.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
    purge.set_defaults(func=cmd_purge_signer)

    unsigned = sub.add_parser("unsigned", help="count the unsigned entries, or remove them (admin token)")
    add_common(unsigned, timeout=600.0)
    unsigned.add_argument("--remove", action="store_true", help="remove every unsigned entry")
    unsigned.add_argument("--dry-run", action="store_true", help="list what --remove would remove")
    unsigned.set_defaults(func=cmd_unsigned)
