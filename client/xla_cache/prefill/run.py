"""``prefill()``: compile a function for each of many argument shapes on this host, in worker processes,
and upload the entries into the namespace the target job will compute, before the target starts.

It reads straight down: the first worker describes the target (this host's runtime, or a TPU topology
deviceless) and the namespace follows from it as ``warm()`` derives it; the namespace's keys are read from
the server (so a second prefill compiles nothing the namespace holds: "stored"); the key components are
compared with the latest real run of the namespace (:mod:`xla_cache.frameworks.key_components`); then
the workers compile the calls, and each entry is checked whole and uploaded in small batches as it comes,
marked prefilled. A prefill killed midway has uploaded whole entries only, and run again compiles only
the rest.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cache_protocol.prefill import prefill_uploader
from xla_cache.config import ClientConfig
from xla_cache.errors import ClientError, ServerError
from xla_cache.frameworks.jax import FRAMEWORK as JAX_ADAPTER
from xla_cache.frameworks.jax import build_fingerprint
from xla_cache.frameworks.key_components import differences
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.http.api import CacheApi
from xla_cache.http.deadline import Deadline
from xla_cache.localcache.cachedir import LocalFile
from xla_cache.logs import logger
from xla_cache.prefill.known import KnownCallsError, known_calls
from xla_cache.prefill.pool import WorkerPool, cpu_count
from xla_cache.prefill.specs import Call, describe, normalize_calls
from xla_cache.prefill.worker import JAX, TORCHAX, WorkerSetup
from xla_cache.transfer.progress import NullProgress, Progress
from xla_cache.transfer.upload import upload_entries

__all__ = ["PrefillError", "PrefillRefused", "PrefillSummary", "check_target", "prefill"]

UPLOAD_BATCH = 32  # entries uploaded together (a bulk upload)
UPLOAD_EVERY = 2.0  # seconds: a batch goes up at least this often, so a killed prefill loses little


class PrefillError(ClientError):
    """The prefill could not run at all (the function, the target, the server); nothing was uploaded."""


class PrefillRefused(ClientError):
    """The prefill's target differs from the namespace's latest real run in a key component: publishing
    would fill the namespace with entries the real jobs would never hit."""


@dataclass
class PrefillSummary:
    """What one prefill did."""

    namespace: str
    server: str | None
    framework: str
    target: str  # "this host (cpu, 1 devices)" or "tpu v5e:2x2 (deviceless)"
    calls: int = 0
    source: str = ""  # with from_namespace: which graph's variants gave the calls
    compiled: int = 0  # compiled here and uploaded (or the server already had the key from another)
    stored: int = 0  # already in the namespace: not compiled
    uploaded: int = 0  # new entries stored by this prefill
    uploaded_bytes: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)  # {"call": ..., "reason": ...}
    verified: str = ""  # how the target was checked against a real run
    unverified: bool = False  # published without a real run to compare with (--unverified)
    workers: int = 0
    workers_started: int = 0
    peak_worker_mib: float = 0.0
    seconds: float = 0.0
    fingerprint: dict[str, Any] = field(default_factory=dict)
    components: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The summary for people."""
        out = [
            f"prefill of namespace {self.namespace} for {self.target}: {self.calls} calls in "
            f"{self.seconds:.1f} s ({self.workers} workers, {self.workers_started} started, peak "
            f"{self.peak_worker_mib:.0f} MiB each)",
            f"  compiled {self.compiled}, already stored {self.stored}, failed {len(self.failed)}; uploaded "
            f"{self.uploaded} new entries ({self.uploaded_bytes:,} bytes) to {self.server}",
        ]
        if self.source:
            out.append(f"  the calls: {self.source}")
        if self.verified:
            out.append(f"  {self.verified}")
        reasons: dict[str, int] = {}
        for failure in self.failed:
            reasons[failure["reason"]] = reasons.get(failure["reason"], 0) + 1
        for reason, count in sorted(reasons.items(), key=lambda item: -item[1])[:10]:
            example = next(f["call"] for f in self.failed if f["reason"] == reason)
            out.append(f"  failed {count}x: {reason} (e.g. {example})")
        return out


def _reference(function: str | Callable[..., Any]) -> str | Callable[..., Any]:
    if isinstance(function, str):
        if ":" not in function:
            raise PrefillError(f"{function!r} is not module:function")
        return function
    if not callable(function):
        raise PrefillError(f"the function to prefill must be callable or 'module:function', not {function!r}")
    return function


def _target_label(facts: Mapping[str, Any], topology: str | None) -> str:
    if topology is not None:
        return f"{facts.get('platform')} {topology} ({facts.get('device_kind')}, deviceless)"
    return f"this host ({facts.get('platform')}, {facts.get('device_count')} devices)"


def provenance(topology: str | None, *, unverified: bool) -> str:
    """What the uploads declare as their uploader (:mod:`cache_protocol.prefill`): kept with each entry,
    named in the manifest; ``warm`` and ``graphs`` count the prefilled entries."""
    return prefill_uploader(platform.node(), os.getpid(), topology, unverified=unverified)


def prefill(
    function: str | Callable[..., Any],
    calls: Sequence[Sequence[Any]] | None = None,
    *,
    from_namespace: str | None = None,
    module: str | None = None,
    topology: str | None = None,
    framework: str = JAX,
    server: str | None = None,
    token: str | None = None,
    workers: int | None = None,
    memory_mib: float | None = 4096.0,
    call_timeout: float | None = 600.0,
    calls_per_worker: int = 200,
    unverified: bool = False,
    scratch_dir: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
) -> PrefillSummary:
    """Compile ``function`` for each call of ``calls`` in worker processes on this host, for this host's
    devices or, with ``topology`` (``"v5e:2x2"``), for that TPU topology deviceless (libtpu installed
    here), and upload the entries into the namespace a job running it there will warm from.

    ``function``: ``"module:function"`` (a jitted function, or one to jit), or an importable callable;
    with ``framework="torchax"`` it makes the ``torch.nn.Module`` that the job passes to
    ``torchax.compile``. ``calls``: per call, its arguments (:mod:`xla_cache.prefill.specs`); or, with
    ``from_namespace`` instead, the shapes that namespace's runs compiled, as the server parsed them
    (:mod:`xla_cache.prefill.known`: the variants of the graph ``module``, by default ``jit_<name>`` or
    the namespace's only graph; JAX only, no shardings). ``workers``:
    at most this many at once (default: the CPUs, at most the calls); ``memory_mib``: a worker over this
    resident memory is killed and its call fails; ``calls_per_worker``: a worker is replaced after so many.
    ``env``: the target's environment as its fingerprint reads it (flags, ``TPU_ACCELERATOR_TYPE``;
    default this process's; the workers compile with this process's own flags). A script calling this
    needs the ``if __name__ == "__main__":`` guard: the workers are started with ``spawn``.

    The namespace's latest real run (its report's key components) must agree with the target, else
    :class:`PrefillRefused` names the component that differs; with no real run yet, or one that differs, it
    publishes only with ``unverified=True`` (the entries are marked so). Returns a
    :class:`PrefillSummary`; server trouble before the first compile raises :class:`PrefillError`.
    """
    started = time.monotonic()
    if framework not in (JAX, TORCHAX):
        raise PrefillError(f"framework must be {JAX} or {TORCHAX}, not {framework!r}")
    config = ClientConfig.resolve(server, token, None)
    if not config.server:
        raise PrefillError("prefill uploads to a server, and the server is set to none")
    source = ""
    if from_namespace is not None:
        if calls is not None:
            raise PrefillError("give the calls or from_namespace (the shapes its runs compiled), not both")
        if framework != JAX:
            raise PrefillError(
                "from_namespace is for JAX functions: torchax's graphs take the model's weights as "
                "parameters too, so their shapes are not the call's (give the calls)"
            )
        with CacheApi(config.server, config.token) as reader:
            try:
                known = known_calls(reader, from_namespace, function, module, timeout)
            except KnownCallsError as exc:
                raise PrefillError(str(exc)) from None
        source = known.line()
        logger.info("xla-cache: prefill of %s", source)
        calls = known.calls
    elif calls is None:
        raise PrefillError(
            "give the calls to compile, or from_namespace to take the shapes its runs compiled"
        )
    plain = normalize_calls(calls)
    unique: dict[str, int] = {}
    order: list[Call] = []
    for call in plain:  # the same call twice compiles once
        if unique.setdefault(json.dumps(call, sort_keys=True), len(order)) == len(order):
            order.append(call)
    setup = WorkerSetup(_reference(function), framework, topology, (os.getcwd(), *sys.path[:1]))
    bound = min(workers or cpu_count(), len(order))
    own_scratch = scratch_dir is None
    scratch = Path(tempfile.mkdtemp(prefix="xla-cache-prefill-") if scratch_dir is None else scratch_dir)
    pool = WorkerPool(
        setup,
        workers=bound,
        memory_mib=memory_mib,
        call_timeout=call_timeout,
        calls_per_worker=calls_per_worker,
        scratch=scratch,
    )
    pool.pending.extend(enumerate(order))
    progress = progress or NullProgress()
    api = CacheApi(config.server, config.token, signer=config.signer(), compression=config.compression)
    summary: PrefillSummary | None = None
    try:
        summary = _run(pool, api, order, topology, framework, unverified, timeout, progress, env)
        summary.calls = len(order)
        summary.source = source
        summary.workers = bound
        return summary
    finally:
        pool.close()
        progress.close()
        api.close()
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        if summary is not None:
            summary.seconds = round(time.monotonic() - started, 3)
            summary.workers_started = pool.started
            summary.peak_worker_mib = round(pool.peak_mib, 1)


def _stored_keys(api: CacheApi, namespace: str, timeout: float) -> frozenset[str]:
    try:
        return frozenset(entry.key for entry in api.manifest(namespace, Deadline(timeout)).entries)
    except ServerError as exc:
        if exc.status == 404:
            return frozenset()
        raise


def check_target(
    api: CacheApi, namespace: str, components: Mapping[str, Any], unverified: bool, timeout: float
) -> tuple[str, bool]:
    """Compare the target's key ``components`` with the namespace's latest real run's: (what was found,
    whether publishing is unverified); :class:`PrefillRefused` naming the differing components, or saying
    no real run exists, unless ``unverified``."""
    latest = api.latest_run_runtime(namespace, Deadline(timeout))
    if latest is None:
        if not unverified:
            raise PrefillRefused(
                f"namespace {namespace} has no real run to compare the target with: nothing verifies that "
                "the target's jobs compute these keys. Run one real job first, or publish anyway with "
                "--unverified (the entries are marked unverified)"
            )
        return "unverified: no real run of the namespace to compare with (published as asked)", True
    run_id, runtime = latest
    differing = differences(components, runtime)
    if differing and not unverified:
        raise PrefillRefused(
            f"the target differs from the latest real run of namespace {namespace} ({run_id}) in "
            + "; ".join(differing)
            + ": its jobs would not hit these entries (nothing was uploaded; --unverified publishes anyway)"
        )
    if differing:
        return (
            f"unverified: differs from real run {run_id} in {'; '.join(differing)} (published as asked)",
            True,
        )
    return f"verified: key components equal to real run {run_id}'s", False


def _run(
    pool: WorkerPool,
    api: CacheApi,
    order: list[Call],
    topology: str | None,
    framework: str,
    unverified: bool,
    timeout: float,
    progress: Progress,
    env: Mapping[str, str] | None,
) -> PrefillSummary:
    pool.start_first()
    summary: PrefillSummary | None = None
    batch: list[LocalFile] = []
    batch_calls: dict[str, int] = {}
    last_upload = time.monotonic()
    uploader = ""
    namespace = ""

    def flush() -> None:
        nonlocal last_upload
        last_upload = time.monotonic()
        if not batch:
            return
        assert summary is not None
        whole = []
        for item in batch:
            problem = JAX_ADAPTER.entry_problem(item.path)
            if problem is None:
                whole.append(item)
            else:
                _fail(summary, order[batch_calls[item.key]], f"the entry JAX wrote is not whole: {problem}")
        result = upload_entries(
            api, namespace, whole, Deadline(timeout), uploader=uploader, compile_times=_times(whole)
        )
        summary.uploaded += result.stored
        summary.uploaded_bytes += result.bytes
        done = set(result.done)
        for item in whole:
            if item.key in done:
                summary.compiled += 1
                item.path.unlink(missing_ok=True)
            else:
                reason = "; ".join(result.errors[:1]) or "the server did not take it"
                _fail(summary, order[batch_calls[item.key]], f"upload failed: {reason}")
        batch.clear()
        batch_calls.clear()

    for event in pool.events():
        if event.kind == "error":
            raise PrefillError(f"a prefill worker could not start: {event.reason}")
        if event.kind == "facts":
            if summary is not None:
                continue
            assert event.facts is not None and event.components is not None
            fingerprint = build_fingerprint(event.facts, os.environ if env is None else env)
            namespace = namespace_id(fingerprint)
            summary = PrefillSummary(
                namespace=namespace,
                server=api.server,
                framework=framework,
                target=_target_label(event.facts, topology),
                fingerprint=fingerprint,
                components=event.components,
            )
            summary.verified, summary.unverified = check_target(
                api, namespace, event.components, unverified, timeout
            )
            uploader = provenance(topology, unverified=summary.unverified)
            _register(api, namespace, fingerprint, timeout)
            pool.configure(namespace, _stored_keys(api, namespace, timeout))
            progress.start("prefill", len(order), 0)
            logger.info("xla-cache: prefilling %d calls into namespace %s", len(order), namespace)
            continue
        assert summary is not None and event.index is not None
        if event.kind == "failed":
            _fail(summary, order[event.index], event.reason)
        else:
            result = event.result
            if result["status"] == "stored":
                summary.stored += 1
            elif result["status"] == "failed":
                _fail(summary, order[event.index], result["reason"])
            else:
                directory = pool.scratch  # the worker's own directory holds it: find it by key
                path = _find(directory, result["key"])
                if path is None:
                    _fail(summary, order[event.index], "the entry vanished from the scratch directory")
                else:
                    size = path.stat().st_size
                    batch.append(LocalFile(result["key"], path, size, 0))
                    batch_calls[result["key"]] = event.index
        progress.advance(entries=1)
        if len(batch) >= UPLOAD_BATCH or time.monotonic() - last_upload > UPLOAD_EVERY:
            flush()
    if summary is None:
        raise PrefillError("no prefill worker started")
    flush()
    return summary


def _find(scratch: Path, key: str) -> Path | None:
    for path in scratch.glob(f"worker-*/*/{key}"):
        return path
    return None


def _times(files: list[LocalFile]) -> dict[str, int]:
    return JAX_ADAPTER.compile_times(files)


def _fail(summary: PrefillSummary, call: Call, reason: str) -> None:
    summary.failed.append({"call": describe(call), "reason": reason})


def _register(api: CacheApi, namespace: str, fingerprint: dict[str, Any], timeout: float) -> None:
    """Register the namespace with its fingerprint unless it exists (a real job's labels stay)."""
    try:
        api.get_namespace(namespace, Deadline(timeout))
        return
    except ServerError as exc:
        if exc.status != 404:
            raise
    api.register_namespace(namespace, fingerprint, {}, Deadline(timeout))
