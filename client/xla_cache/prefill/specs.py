"""The calls a prefill compiles: one list of arguments per call, each argument an array's shape and dtype
(optionally its sharding over a mesh of the target's devices) or a plain value (a static argument).

A specs file is JSON::

    {
      "function": "model.steps:train_step",       # optional: the CLI's module:function wins
      "calls": [
        [{"shape": [8, 128], "dtype": "float32"}, {"shape": [8], "dtype": "int32"}],
        [{"shape": [16, 128], "dtype": "bfloat16",
          "sharding": {"mesh": {"data": 4}, "spec": ["data", null]}}, 3]
      ]
    }

``"calls"`` alone may be the whole file (a JSON list). A sharding's ``mesh`` names each axis and its size,
in order, over the target's devices in their order (``jax.devices()``, or the topology's); ``spec`` is the
:class:`jax.sharding.PartitionSpec` (an axis name, a list of names, or null per dimension). A plain number,
string, boolean or null is passed as it is: the function must take it as a static argument
(``jax.jit(f, static_argnums=...)``).

Nothing here imports JAX: the calls travel to the worker processes as these plain values, and
:func:`jax_arguments` makes JAX objects of them there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xla_cache.errors import ClientError

__all__ = ["Call", "SpecsError", "describe", "jax_arguments", "load_specs", "normalize_calls"]

Call = list[Any]
"""One call's arguments as plain values: an array is ``{"shape": [...], "dtype": "...", "sharding": ...}``."""

_STATIC = (int, float, str, bool, type(None))


class SpecsError(ClientError):
    """The calls given to a prefill are not what it takes; the message says which and why."""


@dataclass(frozen=True)
class Specs:
    """A specs file: the function it names (if any) and its calls."""

    function: str | None
    calls: list[Call]


def _array(value: Mapping[str, Any], where: str) -> dict[str, Any]:
    unknown = set(value) - {"shape", "dtype", "sharding"}
    if unknown:
        raise SpecsError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} (shape, dtype, sharding)")
    shape = value.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise SpecsError(f"{where}: shape must be a list of integers, not {shape!r}")
    if any(d < 0 for d in shape):
        raise SpecsError(f"{where}: shape {shape} has a negative dimension")
    dtype = value.get("dtype", "float32")
    if not isinstance(dtype, str) or not dtype:
        raise SpecsError(f"{where}: dtype must be a name such as float32, not {dtype!r}")
    out: dict[str, Any] = {"shape": list(shape), "dtype": dtype}
    sharding = value.get("sharding")
    if sharding is not None:
        if not isinstance(sharding, Mapping) or not isinstance(sharding.get("mesh"), Mapping):
            raise SpecsError(f"{where}: sharding must be {{'mesh': {{axis: size, ...}}, 'spec': [...]}}")
        mesh = dict(sharding["mesh"])
        if not mesh or not all(isinstance(n, int) and n > 0 for n in mesh.values()):
            raise SpecsError(f"{where}: sharding.mesh must map axis names to positive sizes, not {mesh!r}")
        spec = sharding.get("spec", [])
        if not isinstance(spec, list):
            raise SpecsError(f"{where}: sharding.spec must be a list (one entry per dimension)")
        out["sharding"] = {"mesh": mesh, "spec": spec}
    return out


def normalize_calls(calls: Any) -> list[Call]:
    """``calls`` checked and made plain: a list of calls, each a list of arguments. An argument may also be
    a :class:`jax.ShapeDtypeStruct` (or anything with ``shape`` and ``dtype``); :class:`SpecsError` says
    what is wrong with the first bad one."""
    if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)):
        raise SpecsError(f"the calls must be a list of argument lists, not {type(calls).__name__}")
    if not calls:
        raise SpecsError("there are no calls to compile")
    plain: list[Call] = []
    for number, call in enumerate(calls):
        if not isinstance(call, Sequence) or isinstance(call, (str, bytes)):
            raise SpecsError(f"call {number}: must be a list of arguments, not {type(call).__name__}")
        arguments: Call = []
        for position, argument in enumerate(call):
            where = f"call {number}, argument {position}"
            if isinstance(argument, Mapping):
                arguments.append(_array(argument, where))
            elif hasattr(argument, "shape") and hasattr(argument, "dtype"):
                arguments.append({"shape": [int(d) for d in argument.shape], "dtype": str(argument.dtype)})
            elif isinstance(argument, _STATIC):
                arguments.append(argument)
            else:
                raise SpecsError(f"{where}: {type(argument).__name__} is neither an array spec nor a value")
        plain.append(arguments)
    return plain


def load_specs(path: str | Path) -> Specs:
    """Read a specs file (see the module's doc); :class:`SpecsError` naming the file and the problem."""
    try:
        document = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SpecsError(f"cannot read the specs file {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecsError(f"the specs file {path} is not JSON: {exc}") from None
    function = None
    if isinstance(document, Mapping):
        unknown = set(document) - {"function", "calls"}
        if unknown:
            raise SpecsError(f"the specs file {path}: unknown field(s) {', '.join(sorted(unknown))}")
        function = document.get("function")
        if function is not None and not isinstance(function, str):
            raise SpecsError(f"the specs file {path}: function must be 'module:function'")
        document = document.get("calls")
    try:
        return Specs(function, normalize_calls(document))
    except SpecsError as exc:
        raise SpecsError(f"the specs file {path}: {exc}") from None


def describe(call: Call) -> str:
    """A call as one short line: ``(8,128) float32, (8,) int32, 3``."""
    parts = []
    for argument in call:
        if isinstance(argument, dict):
            shape = ",".join(str(d) for d in argument["shape"])
            sharded = " sharded" if "sharding" in argument else ""
            parts.append(f"({shape}) {argument['dtype']}{sharded}")
        else:
            parts.append(repr(argument))
    return ", ".join(parts)


def jax_arguments(call: Call, devices: Sequence[Any]) -> list[Any]:
    """The call's arguments as JAX takes them for ``lower``: :class:`jax.ShapeDtypeStruct` (with a
    :class:`~jax.sharding.NamedSharding` over ``devices`` where one is asked), static values as they are.
    In a worker process only (it imports JAX)."""
    import importlib

    import numpy as np

    jax: Any = importlib.import_module("jax")  # untyped where it matters: Any, as the adapters hold it
    Mesh, NamedSharding, PartitionSpec = (
        jax.sharding.Mesh,
        jax.sharding.NamedSharding,
        jax.sharding.PartitionSpec,
    )

    arguments: list[Any] = []
    for position, argument in enumerate(call):
        if not isinstance(argument, dict):
            arguments.append(argument)
            continue
        sharding = None
        if "sharding" in argument:
            mesh_axes = argument["sharding"]["mesh"]
            size = 1
            for n in mesh_axes.values():
                size *= n
            if size > len(devices):
                raise SpecsError(
                    f"argument {position}: a mesh of {size} devices, and the target has {len(devices)}"
                )
            grid = np.array(list(devices)[:size], dtype=object).reshape(tuple(mesh_axes.values()))
            mesh = Mesh(grid, tuple(mesh_axes))
            spec = [tuple(a) if isinstance(a, list) else a for a in argument["sharding"]["spec"]]
            sharding = NamedSharding(mesh, PartitionSpec(*spec))
        arguments.append(jax.ShapeDtypeStruct(tuple(argument["shape"]), argument["dtype"], sharding=sharding))
    return arguments


def as_json(calls: list[Call]) -> str:
    """The calls as a specs file's text."""
    return json.dumps({"calls": calls})
