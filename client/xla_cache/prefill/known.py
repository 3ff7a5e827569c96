"""The calls of a prefill ``--from`` a namespace: the shapes its runs compiled, as the server parsed them.

The server parses each stored entry's HLO module in the background and keeps its parameters' shapes
(``(f32[16,3], s32[8]) -> (...)``); ``GET /admin/graphs/variants`` answers one graph's variants a page at a
time, their parameters parsed (element type, dimensions). Each variant becomes one call: one
``{"shape", "dtype"}`` argument per parameter, in order. So it fits a function whose arguments are the
arrays the graph takes, in that order: a jitted function of arrays (no static arguments, no argument it
leaves unused: ``jax.jit`` drops those from the graph, and tuples or dicts arrive flattened). No shardings:
the shapes the server keeps are the compiled module's, not how the job placed its arguments, so each call is
compiled unsharded. torchax's graphs take the model's weights as parameters too: ``--from`` is for JAX.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xla_cache.errors import ClientError, ServerError
from xla_cache.http.api import CacheApi
from xla_cache.http.deadline import Deadline
from xla_cache.prefill.specs import Call

__all__ = ["MAX_CALLS", "XLA_DTYPES", "KnownCalls", "known_calls", "variant_call"]

MAX_CALLS = 10_000  # variants read from the server at most (pages of PAGE)
PAGE = 500

XLA_DTYPES = {
    "pred": "bool",
    "s4": "int4",
    "s8": "int8",
    "s16": "int16",
    "s32": "int32",
    "s64": "int64",
    "u4": "uint4",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "c64": "complex64",
    "c128": "complex128",
    "f8e4m3fn": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
    "f8e4m3b11fnuz": "float8_e4m3b11fnuz",
    "f8e4m3fnuz": "float8_e4m3fnuz",
    "f8e5m2fnuz": "float8_e5m2fnuz",
}
"""XLA's element types (as a shapes text names them) and the dtype names JAX takes."""


class KnownCallsError(ClientError):
    """The namespace's graphs cannot give the calls (unknown namespace or module, nothing parsed)."""


@dataclass
class KnownCalls:
    """The calls read from a namespace: of which graph, and the variants that gave none, by reason."""

    namespace: str
    module: str
    calls: list[Call]
    skipped: dict[str, int] = field(default_factory=dict)
    truncated: bool = False  # more than MAX_CALLS variants: the first MAX_CALLS in signature order

    def line(self) -> str:
        out = (
            f"{len(self.calls)} calls from the variants of graph {self.module} in namespace {self.namespace}"
        )
        if self.skipped:
            out += " (skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items())) + ")"
        if self.truncated:
            out += f" (the first {MAX_CALLS:,} only)"
        return out


def variant_call(params: list[dict[str, Any]] | None) -> Call | str:
    """One variant's parameters (as the server parsed them) as a call's arguments, or why it gives none."""
    if params is None:
        return "not in the parsed form"
    call: Call = []
    for param in params:
        if param.get("dynamic"):
            return "with a dynamic dimension"
        dtype = XLA_DTYPES.get(str(param.get("element")))
        if dtype is None:
            return f"of element type {param.get('element')}"
        call.append({"shape": [int(d) for d in param.get("dims", [])], "dtype": dtype})
    return call


def _function_name(function: str | Callable[..., Any]) -> str:
    if isinstance(function, str):
        return function.rpartition(":")[2].rpartition(".")[2]
    return str(getattr(function, "__name__", ""))


def _choose(graphs: list[dict[str, Any]], namespace: str, function: str | Callable[..., Any]) -> str:
    """The graph the function compiles to: ``jit_<its name>`` where the namespace has it, else its only
    graph; else the choice is the caller's (``module=``), and the error names the graphs."""
    names = [str(g["module"]) for g in graphs]
    if not names:
        raise KnownCallsError(
            f"namespace {namespace} holds no parsed graph yet (the server parses entries a few seconds "
            "after they are stored; a namespace of foreign entries may have none)"
        )
    name = _function_name(function)
    guesses = [n for n in names if n in (f"jit_{name}", name)]
    if len(guesses) == 1:
        return guesses[0]
    if len(names) == 1:
        return names[0]
    shown = ", ".join(f"{g['module']} ({g['variants']} variants)" for g in graphs[:10])
    raise KnownCallsError(
        f"namespace {namespace} holds {len(names)} graphs and none is jit_{name}: name one with --module "
        f"(module=): {shown}"
    )


def known_calls(
    api: CacheApi,
    namespace: str,
    function: str | Callable[..., Any],
    module: str | None,
    timeout: float,
    *,
    max_calls: int = MAX_CALLS,
) -> KnownCalls:
    """The calls of ``module``'s variants in ``namespace`` (the module: :func:`_choose`'s when None), read
    a page at a time; :class:`KnownCallsError` saying what is wrong."""
    try:
        if module is None:
            module = _choose(
                api.graph_variants(namespace, None, Deadline(timeout))["graphs"], namespace, function
            )
        found = KnownCalls(namespace, module, [])
        after: str | None = None
        while True:
            page = api.graph_variants(
                namespace, module, Deadline(timeout), after=after, limit=min(PAGE, max_calls)
            )
            for variant in page["variants"]:
                if len(found.calls) >= max_calls:
                    found.truncated = True
                    break
                call = variant_call(variant.get("params"))
                if isinstance(call, str):
                    found.skipped[call] = found.skipped.get(call, 0) + 1
                else:
                    found.calls.append(call)
            after = page.get("next")
            if after is None or found.truncated:
                break
    except ServerError as exc:
        if exc.status == 404:
            raise KnownCallsError(exc.detail or str(exc)) from None
        raise
    if not found.calls:
        raise KnownCallsError(
            f"the variants of graph {module} in namespace {namespace} give no call to compile ("
            + ", ".join(f"{n} {why}" for why, n in found.skipped.items())
            + ")"
        )
    return found
