"""The commands that work on this host's cache directory: ``warm`` (download, or ``--follow`` beside a job),
``push`` (upload, or ``--import`` a framework's own directory) and ``doctor`` (does this torch_xla load its
own entries?)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cache_protocol import FINGERPRINT_FILE
from xla_cache.cli.common import (
    add_common,
    add_framework,
    cache_api,
    config_of,
    emit,
    namespace_name,
    progress_of,
    runtime_fingerprint,
    server_of,
)
from xla_cache.config import ClientConfig
from xla_cache.errors import ClientError, ServerProblem
from xla_cache.frameworks import AUTO, Framework, all_frameworks, choose, framework_named
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.http.deadline import Deadline
from xla_cache.localcache.cachedir import read_fingerprint, scan
from xla_cache.transfer.nearest import nearest_line

__all__ = ["add_local_commands", "cmd_doctor", "cmd_push", "cmd_warm"]


def _namespace_dirs(cache_dir: Path, namespace: str | None) -> list[Path]:
    if namespace:
        return [cache_dir / namespace]
    if not cache_dir.is_dir():
        return []
    return sorted(p for p in cache_dir.iterdir() if p.is_dir() and (p / FINGERPRINT_FILE).is_file())


def _named_namespace(args: argparse.Namespace, config: ClientConfig) -> tuple[dict[str, Any], str]:
    """``--namespace``: its fingerprint as the server has it ({} if it has none) and whose cache it is
    (from that fingerprint, else ``--framework``, else the framework installed), without importing any."""
    with cache_api(config) as api:
        info = api.get_namespace(args.namespace, Deadline(args.timeout))
    fingerprint = dict(info.get("fingerprint") or {})
    framework = str(fingerprint.get("framework") or "")
    if not framework:
        framework = choose(args.framework).name  # auto: the one installed; nothing is imported
    return fingerprint, framework


def cmd_warm(args: argparse.Namespace) -> int:
    """Download this runtime's entries (or ``--namespace``'s) into the cache directory (the framework is not
    initialized; with ``--namespace`` it is not even imported)."""
    from xla_cache.warming import warm

    config = config_of(args)
    if args.namespace:
        fingerprint, framework = _named_namespace(args, config)
    else:
        fingerprint, framework = runtime_fingerprint(args), args.framework
    report = warm(
        server_of(config),
        config.cache_dir,
        framework=framework,
        token=config.token,
        max_bytes=args.max_bytes,
        timeout=args.timeout,
        initialize=False,
        upload=False,
        fingerprint=fingerprint or None,
        progress=progress_of(args),
        namespace=args.namespace,
        follow=args.follow,
    )
    lines = [
        f"namespace   {report.namespace}",
        f"framework   {report.framework}",
        f"cache dir   {report.cache_dir}",
        f"downloaded  {report.downloaded_entries} entries, {report.downloaded_bytes} bytes",
        f"present     {report.present_entries} entries, {report.present_bytes} bytes",
        *(
            [f"unverified  {report.unverified_entries} entries skipped: no trusted key signed them"]
            if report.unverified_entries
            else []
        ),
        *(
            [
                f"prefilled   {report.prefilled_entries} of the namespace's {report.manifest_entries} "
                "entries compiled ahead of the target job"
                + (
                    f" ({report.prefilled_unverified} unverified: no real run checked their target)"
                    if report.prefilled_unverified
                    else ""
                )
            ]
            if report.prefilled_entries
            else []
        ),
        f"seconds     {report.seconds:.2f}",
    ]
    if report.nearest:
        lines.append(f"why         {nearest_line(report.manifest_entries, report.nearest)}")
    lines += [f"error       {error}" for error in report.errors]
    lines.append("a job that does not call xla_cache.warm() uses it with:")
    lines += [f"    {line}" for line in framework_named(report.framework).setup_lines(Path(report.cache_dir))]
    emit(args, report.as_dict(), lines)
    if args.follow and report.feed_cursor is not None:
        directory = Path(report.cache_dir)
        return _follow(args, config, report.namespace, directory, report.feed_cursor, report.framework)
    return 1 if report.errors and args.strict else 0


def _follow(
    args: argparse.Namespace,
    config: ClientConfig,
    namespace: str,
    directory: Path,
    cursor: int,
    framework: str,
) -> int:
    """``warm --follow``: beside a job, fetch what other jobs store and upload what the job writes, until
    interrupted (Ctrl-C or SIGTERM)."""
    import signal
    import threading

    from xla_cache.transfer.follower import Follower
    from xla_cache.transfer.uploader import Uploader
    from xla_cache.warming import FOLLOW_UPLOAD_INTERVAL

    adapter = choose(framework)
    api = cache_api(config, signer=config.signer())
    follower = Follower(
        api, namespace, directory, cursor, check=adapter.entry_problem, trusted=config.verifier()
    )
    uploader = Uploader(
        api,
        namespace,
        directory,
        framework=adapter,
        known=scan(directory, adapter.is_entry),
        interval=FOLLOW_UPLOAD_INTERVAL,
        settle=FOLLOW_UPLOAD_INTERVAL,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print(f"following {namespace} into {directory} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    follower.start()
    uploader.start()
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        fetched = follower.stop()
        uploader.stop()
        sent = uploader.flush()
        api.close()
    lines = [f"fetched {fetched.delivered} entries ({fetched.bytes} bytes), uploaded {sent.uploaded}"]
    emit(args, {"delivered": fetched.delivered, "bytes": fetched.bytes, "uploaded": sent.uploaded}, lines)
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    """Upload every entry of the cache directory's namespaces that the server lacks (``--import DIR``: of a
    plain torch_xla or JAX cache directory)."""
    from xla_cache.transfer.upload import upload_entries

    config = config_of(args)
    if args.import_dir:
        return _push_import(args, config)
    directories = _namespace_dirs(config.cache_dir, args.namespace)
    if not directories:
        raise ClientError(f"no namespace directories (with a {FINGERPRINT_FILE}) under {config.cache_dir}")
    results: list[dict[str, Any]] = []
    failed = False
    with cache_api(config, signer=config.signer()) as api:
        for directory in directories:
            namespace = directory.name
            fingerprint = read_fingerprint(directory)
            framework = framework_named(str((fingerprint or {}).get("framework", "torch_xla")))
            files = [
                item
                for item in scan(directory, framework.is_entry).values()
                if framework.entry_problem(item.path) is None
            ]
            deadline = Deadline(args.timeout)
            row: dict[str, Any] = {"namespace": namespace, "directory": str(directory), "entries": len(files)}
            try:
                if fingerprint is not None:
                    if namespace_id(fingerprint) != namespace:
                        other = namespace_id(fingerprint)
                        raise ClientError(f"{directory}: its {FINGERPRINT_FILE} belongs to namespace {other}")
                    api.register_namespace(namespace, fingerprint, {}, deadline)
                result = upload_entries(
                    api, namespace, files, deadline, progress=progress_of(args), workers=4
                )
            except ServerProblem as exc:
                row["error"] = exc.reason
                failed = True
            else:
                row.update(
                    uploaded=result.stored,
                    bytes=result.bytes,
                    already_present=result.already_present,
                    conflicts=result.conflicts,
                    errors=result.errors,
                )
                failed = failed or bool(result.errors)
            results.append(row)
    lines = []
    for row in results:
        if "error" in row:
            lines.append(f"{row['namespace']}: failed: {row['error']}")
        else:
            lines.append(
                f"{row['namespace']}: {row['uploaded']} uploaded ({row['bytes']} bytes), "
                f"{row['already_present']} already on the server, {row['conflicts']} conflicts"
                + (f", {len(row['errors'])} errors" if row["errors"] else "")
            )
    emit(args, {"namespaces": results}, lines)
    return 1 if failed else 0


def _framework_of_directory(name: str, directory: Path) -> Framework:
    """``--framework``, or for auto whose cache ``directory`` is by its file names (JAX names its entries
    ``<name>-<64 hex>-cache``; anything else is taken for torch_xla's); nothing is imported."""
    if name != AUTO:
        return framework_named(name)
    frameworks = all_frameworks()
    names = [path.name for path in directory.iterdir() if path.is_file()]
    if "jax" in frameworks and any(frameworks["jax"].is_entry(n) for n in names):
        return frameworks["jax"]
    return framework_named("torch_xla")


def _push_import(args: argparse.Namespace, config: ClientConfig) -> int:
    """``push --import DIR``: a framework's own cache directory (files named by hash, no fingerprint file)
    into this runtime's namespace, or into ``--namespace`` (then the framework is not imported)."""
    from xla_cache.transfer.upload import upload_entries

    directory = Path(args.import_dir).expanduser()
    if not directory.is_dir():
        raise ClientError(f"--import {directory}: not a directory")
    fingerprint: dict[str, Any] | None = None
    if args.namespace:
        namespace = args.namespace
        framework = _framework_of_directory(args.framework, directory)
    else:
        fingerprint = runtime_fingerprint(args)
        namespace = namespace_id(fingerprint)
        framework = framework_named(str(fingerprint.get("framework", "torch_xla")))
    files = [
        item
        for item in scan(directory, framework.is_entry).values()
        if framework.entry_problem(item.path) is None
    ]
    skipped = len(scan(directory, framework.is_entry)) - len(files)
    deadline = Deadline(args.timeout)
    with cache_api(config, signer=config.signer()) as api:
        if fingerprint is not None:
            api.register_namespace(namespace, fingerprint, {}, deadline)
        result = upload_entries(api, namespace, files, deadline, progress=progress_of(args), workers=4)
    row = {
        "namespace": namespace,
        "directory": str(directory),
        "framework": framework.name,
        "entries": len(files),
        "unloadable_skipped": skipped,
        "uploaded": result.stored,
        "bytes": result.bytes,
        "already_present": result.already_present,
        "conflicts": result.conflicts,
        "errors": result.errors,
    }
    lines = [
        f"{namespace}: {result.stored} uploaded ({result.bytes} bytes), {result.already_present} already on "
        f"the server, {result.conflicts} conflicts, from {directory} ({framework.name} entries"
        + (f"; {skipped} it could not load were skipped)" if skipped else ")")
        + (f", {len(result.errors)} errors" if result.errors else "")
    ]
    emit(args, {"namespaces": [row]}, lines)
    return 1 if result.errors else 0


def _prefill_check(args: argparse.Namespace) -> int:
    """``doctor --prefill-check``: compile a probe here and deviceless for the same target; 0 when they
    agree."""
    from xla_cache.prefill.check import prefill_check

    print(
        "xla-cache doctor --prefill-check: compiling one small function on this host's devices, then in a "
        "prefill worker for the same target without them",
        file=sys.stderr,
        flush=True,
    )
    found = prefill_check(args.topology, timeout=args.timeout)
    lines = [f"verdict      {found['verdict']}", f"passed       {'yes' if found['passed'] else 'NO'}"]
    if found.get("topology"):
        lines.append(f"topology     {found['topology']} (deviceless)")
    for name, value in zip(("namespace", "deviceless"), found.get("namespaces") or (), strict=False):
        lines.append(f"{name:<12} {value}")
    lines += [f"differs      {item}" for item in found.get("differing") or []]
    lines.append("send us the output of --json (no secrets: versions, devices, digests of flags)")
    emit(args, found, lines)
    return 0 if found["passed"] else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    """Two-process self-test: does this torch_xla load its own persistent-cache entries? With ``--auto``
    only whether auto-activation (XLA_CACHE_AUTO) is on for this interpreter, and why not."""
    from xla_cache.cli.doctor import run_doctor
    from xla_cache.cli.launch import auto_lines

    auto, auto_text = auto_lines()
    if args.auto:
        emit(args, auto, auto_text)
        return 0
    if args.prefill_check:
        return _prefill_check(args)
    config = config_of(args)
    print(
        "xla-cache doctor: starting torch_xla in two processes, one after the other (the second must load "
        "what the first compiled); each takes 10-60 s, most of it importing torch_xla",
        file=sys.stderr,
        flush=True,
    )
    report = run_doctor(server=config.server, token=config.token, timeout=args.timeout)
    lines = [
        f"torch_xla          {report.torch_xla_version}",
        f"namespace          {report.namespace}",
        f"loads own entries  {({True: 'yes', False: 'NO', None: 'unknown'})[report.loads_own_entries]}",
        f"verdict            {report.verdict}",
        f"seconds            {', '.join(f'{s:g}' for s in report.seconds)} (each self-test process)",
    ]
    if report.server:
        state = "ready" if report.server_ready else f"NOT ready ({report.server_error})"
        lines.append(f"server             {report.server}: {state}")
    if report.nearest:
        lines.append(f"namespace entries  {nearest_line(report.namespace_entries or 0, report.nearest)}")
    emit(args, {**report.as_dict(), "auto": auto}, [*lines, *auto_text])
    if report.loads_own_entries is None:
        return 2
    return 0 if report.loads_own_entries and report.server_ready is not False else 1


def add_local_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register warm, push and doctor on ``xla-cache``'s subparsers."""
    warm = sub.add_parser("warm", help="download this runtime's entries into the cache directory")
    add_common(warm, timeout=30.0)
    warm.add_argument(
        "--cache-dir",
        help="base cache directory (default: $XLA_CACHE_DIR, the config file's, or ~/.cache/xla-cache)",
    )
    warm.add_argument("--max-bytes", type=int, help="download at most this many bytes")
    warm.add_argument(
        "--namespace",
        type=namespace_name,
        help="warm this namespace as it is on the server (no framework import, no fingerprint)",
    )
    warm.add_argument(
        "--follow",
        action="store_true",
        help="then keep running: fetch what other jobs store, upload what appears here (until Ctrl-C)",
    )
    add_framework(warm)
    warm.add_argument(
        "--spmd", action="store_true", help="the job runs with SPMD (torch_xla.runtime.use_spmd)"
    )
    warm.add_argument("--no-progress", action="store_true", help="no progress bars")
    warm.add_argument("--strict", action="store_true", help="exit 1 when the warm met errors")
    warm.set_defaults(func=cmd_warm)

    push = sub.add_parser("push", help="upload local entries the server lacks")
    add_common(push, timeout=300.0)
    push.add_argument(
        "--cache-dir",
        help="base cache directory (default: $XLA_CACHE_DIR, the config file's, or ~/.cache/xla-cache)",
    )
    push.add_argument(
        "--namespace",
        type=namespace_name,
        help="only this namespace's directory (default: every one); with --import, the namespace to fill",
    )
    push.add_argument(
        "--import",
        dest="import_dir",
        metavar="DIR",
        help="upload a plain torch_xla or JAX cache directory (no fingerprint file) into this runtime's "
        "namespace, or into --namespace (then torch_xla or jax is not imported)",
    )
    add_framework(push)
    push.add_argument("--spmd", action="store_true", help="with --import: fingerprint torch_xla with SPMD on")
    push.add_argument("--no-progress", action="store_true", help="no progress bars")
    push.set_defaults(func=cmd_push)

    doctor = sub.add_parser("doctor", help="can this torch_xla load its own cache entries?")
    add_common(doctor, timeout=300.0)
    doctor.add_argument(
        "--prefill-check",
        action="store_true",
        help="compile one small JAX function on this host's devices and deviceless for the same target (its "
        "TPU topology), and compare namespaces, key components and keys (docs/prefill.md)",
    )
    doctor.add_argument("--topology", help="with --prefill-check: the TPU topology (default: this host's)")
    doctor.add_argument(
        "--auto",
        action="store_true",
        help="only say whether XLA_CACHE_AUTO auto-activation is on for this interpreter, and why not "
        "(starts no framework)",
    )
    doctor.set_defaults(func=cmd_doctor)
