"""One prefill worker process (started with ``spawn``: a new interpreter, never a fork of a process that
holds JAX's threads): it imports the function, describes the target it compiles for, then compiles call
after call into its own scratch cache directory until its pipe closes.

The conversation over its pipe, in order:

1. worker -> ``("facts", facts, components)``: the target runtime's facts
   (:func:`xla_cache.frameworks.jax.runtime_facts`, or a TPU topology's, deviceless) and the components
   of JAX's cache key it can see (:mod:`xla_cache.frameworks.key_components`); or ``("error", reason)``.
2. parent -> ``("setup", directory, stored_keys)``: the scratch directory (``<scratch>/<slot>/<namespace>``,
   as ``warm()`` lays out a cache) and the keys the namespace already holds.
3. parent -> ``("call", index, call)``; worker -> ``("done", index, result)``; again and again.
4. parent -> ``None`` (or the pipe closes: the parent is gone): the worker ends.

JAX's persistent cache is set up as ``warm()`` sets it up (:meth:`xla_cache.frameworks.jax.Jax.initialize`:
XLA's side caches off, so the key does not contain the directory; every compilation cached). The key of
each compilation is read where JAX resolves it (``jax._src.compiler._resolve_compilation_strategy``, jax
0.10): a key the namespace holds stops the compilation there ("stored"), before XLA runs.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

__all__ = ["WorkerSetup", "resolve_function", "worker_main"]

JAX = "jax"
TORCHAX = "torchax"
_REASON_LENGTH = 400


@dataclass(frozen=True)
class WorkerSetup:
    """What every worker is started with (pickled to the new interpreter)."""

    function: str | Callable[..., Any]  # "module:attribute", or a callable importable by reference
    framework: str = JAX  # "jax", or "torchax": the function makes the torch.nn.Module to compile
    topology: str | None = None  # a TPU topology ("v5e:2x2") compiled for deviceless; None: this host
    sys_path: tuple[str, ...] = ()  # put first on sys.path (the directory the CLI ran in)


class _AlreadyStored(Exception):
    """Raised where JAX has resolved a key the namespace already holds: nothing is compiled."""


def resolve_function(reference: str | Callable[..., Any]) -> Any:
    """The object ``module:attribute`` names (attributes may be dotted); a callable as it is."""
    if not isinstance(reference, str):
        return reference
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{reference!r} is not module:function")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


class _KeyWatch:
    """Records the key of each compilation, and stops one whose key is in ``stored`` while ``armed`` (the
    prefill's own compiles: not those of making the function, a torchax model's transfers say)."""

    def __init__(self, stored: frozenset[str]) -> None:
        self.stored = stored
        self.key: str | None = None
        self.armed = False

    def install(self) -> None:
        from jax._src import compiler

        original = compiler._resolve_compilation_strategy

        def resolve(*args: Any, **kwargs: Any) -> Any:
            key, options = original(*args, **kwargs)
            if not self.armed:
                return key, options
            self.key = key
            if key is not None and f"{key}-cache" in self.stored:
                raise _AlreadyStored(key)
            return key, options

        compiler._resolve_compilation_strategy = resolve


def _jax() -> Any:
    """JAX, typed as the adapters hold it (its public API is partly untyped)."""
    return importlib.import_module("jax")


def _target_devices(topology: str | None) -> list[Any]:
    jax = _jax()

    if topology is None:
        return list(jax.devices())
    from jax.experimental import topologies

    try:
        description = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    except Exception as exc:  # no libtpu, or a topology it does not know
        raise RuntimeError(
            f"cannot describe TPU topology {topology!r} here ({type(exc).__name__}: {exc}); deviceless "
            "compiles need libtpu (pip install 'jax[tpu]')"
        ) from exc
    return list(description.devices)


def _lowerable(setup: WorkerSetup) -> tuple[Any, tuple[Any, ...]]:
    """The jitted function to lower, and the arguments every call passes before its own (torchax: the
    module's parameters and buffers, as ``torchax.compile`` passes them)."""
    jax = _jax()
    made = resolve_function(setup.function)
    if setup.framework == JAX:
        return (made if hasattr(made, "lower") else jax.jit(made)), ()
    import torch

    torchax: Any = importlib.import_module("torchax")
    interop: Any = importlib.import_module("torchax.interop")

    torchax.enable_globally()
    module = made if isinstance(made, torch.nn.Module) else made()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{setup.function!r} made a {type(module).__name__}, not a torch.nn.Module")
    compiled = torchax.compile(module.to("jax"))
    # What torchax.compile's JittableModule.make_jitted("forward") builds, lowerable here.
    jitted = jax.jit(
        interop.jax_view(functools.partial(compiled.functional_call, "forward")),
        **(compiled._extra_jit_args or {}),
    )
    return jitted, (interop.jax_view(compiled.params), interop.jax_view(compiled.buffers))


def _arguments(call: list[Any], devices: Sequence[Any], topology: str | None) -> list[Any]:
    from xla_cache.prefill.specs import jax_arguments

    jax = _jax()
    SingleDeviceSharding = jax.sharding.SingleDeviceSharding

    arguments = jax_arguments(call, devices)
    if topology is not None:  # deviceless: an unsharded argument lives on the target's first device
        arguments = [
            jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=SingleDeviceSharding(devices[0]))
            if isinstance(a, jax.ShapeDtypeStruct) and a.sharding is None
            else a
            for a in arguments
        ]
    return arguments


def _compile(
    watch: _KeyWatch,
    target: Any,
    prefix: tuple[Any, ...],
    call: list[Any],
    devices: Sequence[Any],
    topology: str | None,
    directory: Path,
) -> dict[str, Any]:
    watch.key = None
    started = time.monotonic()
    try:
        lowered = target.lower(*prefix, *_arguments(call, devices, topology))
        watch.armed = True
        try:
            lowered.compile()
        finally:
            watch.armed = False
    except _AlreadyStored as stored:
        return {"status": "stored", "key": f"{stored.args[0]}-cache"}
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
        return {"status": "failed", "reason": reason[:_REASON_LENGTH]}
    seconds = round(time.monotonic() - started, 3)
    if watch.key is None:
        return {"status": "failed", "reason": "JAX computed no cache key (its persistent cache is off)"}
    key = f"{watch.key}-cache"
    if not (directory / key).is_file():
        return {
            "status": "failed",
            "reason": "JAX wrote no cache entry (a function with host callbacks, such as jax.debug.print, "
            "is never cached)",
        }
    return {"status": "compiled", "key": key, "seconds": seconds}


def worker_main(conn: Connection, setup: WorkerSetup) -> None:
    """The worker's life (see the module's doc)."""
    sys.path[:0] = [p for p in setup.sys_path if p not in sys.path]
    if (
        setup.topology is not None
    ):  # libtpu locks itself to one process unless told: workers compile side by side
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        from xla_cache.frameworks.jax import FRAMEWORK
        from xla_cache.frameworks.key_components import key_components, target_facts

        _jax().config.update("jax_persistent_cache_enable_xla_caches", "none")  # as warm() sets it
        devices = _target_devices(setup.topology)
        facts = target_facts(devices, setup.topology)
        conn.send(("facts", facts, key_components(devices, os.environ)))
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"[:_REASON_LENGTH]))
        return
    try:
        message = conn.recv()
    except EOFError:
        return
    if not message or message[0] != "setup":
        return
    _, directory, stored = message
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for leftover in directory.iterdir():  # a run killed while JAX wrote: never a part of an entry
        if FRAMEWORK.is_entry(leftover.name) and FRAMEWORK.entry_problem(leftover) is not None:
            leftover.unlink(missing_ok=True)
    try:
        FRAMEWORK.initialize(directory)
        watch = _KeyWatch(frozenset(stored))
        watch.install()
        target, prefix = _lowerable(setup)
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"[:_REASON_LENGTH]))
        return
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        _, index, call = message
        result = _compile(watch, target, prefix, call, devices, setup.topology, directory)
        try:
            conn.send(("done", index, result))
        except (BrokenPipeError, OSError):
            return
