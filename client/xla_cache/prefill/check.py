"""``xla-cache doctor --prefill-check`` (issue 44, item 3): does a deviceless compile for this host's
accelerator compute what this host computes?

It compiles one small function twice: here, on this process's devices (a TPU host's TPU), and in a prefill
worker for the same target without it (for a TPU, its topology deviceless, as ``xla-cache prefill
--topology`` would), and compares the namespaces, the components of JAX's key and the keys themselves. On a
TPU host its output is what to send us: until such a check passes on a real TPU, TPU prefill is unverified.
On a CPU host it checks the prefill's own path (the worker compiles for this host).
"""

from __future__ import annotations

import importlib
import os
import tempfile
from pathlib import Path
from typing import Any

from xla_cache.frameworks.jax import build_fingerprint
from xla_cache.frameworks.key_components import differences, key_components, target_facts
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.prefill.pool import WorkerPool
from xla_cache.prefill.worker import WorkerSetup, _KeyWatch

__all__ = ["PROBE_CALL", "prefill_check", "topology_name"]

PROBE_CALL: list[Any] = [{"shape": [8, 128], "dtype": "float32"}]
_GENERATIONS = {"TPU v4": "v4", "TPU v5 lite": "v5e", "TPU v5": "v5p", "TPU v6 lite": "v6e"}


def _probe(x: Any) -> Any:
    """The small function both sides compile (each jits it as ``jax.jit(_probe)``)."""
    jnp = importlib.import_module("jax.numpy")
    return jnp.tanh(x @ x.T).sum(axis=0)


def topology_name(facts: dict[str, Any]) -> str | None:
    """The topology name ``jax.experimental.topologies`` takes for a TPU runtime's facts (``v5e:2x2``), or
    None when it cannot be told (not a TPU, a device kind not known here)."""
    generation = _GENERATIONS.get(str(facts.get("device_kind")))
    extent = (facts.get("topology") or {}).get("extent")
    if facts.get("platform") != "tpu" or generation is None or not extent:
        return None
    if generation in ("v5e", "v6e"):  # two-dimensional slices
        extent = [n for n in extent if n > 1] or [1]
        extent = [*extent, 1][:2]
    return f"{generation}:{'x'.join(str(n) for n in extent)}"


def _live(directory: Path) -> dict[str, Any]:
    from xla_cache.frameworks.jax import FRAMEWORK
    from xla_cache.prefill.specs import jax_arguments

    jax: Any = importlib.import_module("jax")
    FRAMEWORK.initialize(directory)  # as warm() sets JAX up (this command's own process)
    devices = list(jax.devices())
    facts = target_facts(devices, None)
    components = key_components(devices, os.environ)
    watch = _KeyWatch(frozenset())
    watch.install()
    watch.armed = True
    jax.jit(_probe).lower(*jax_arguments(PROBE_CALL, devices)).compile()
    watch.armed = False
    return {"facts": facts, "components": components, "key": f"{watch.key}-cache" if watch.key else None}


def _deviceless(topology: str | None, scratch: Path, timeout: float) -> dict[str, Any]:
    setup = WorkerSetup("xla_cache.prefill.check:_probe", "jax", topology)
    pool = WorkerPool(
        setup, workers=1, memory_mib=None, call_timeout=timeout, calls_per_worker=1, scratch=scratch
    )
    pool.pending.append((0, PROBE_CALL))
    pool.start_first()
    found: dict[str, Any] = {}
    try:
        for event in pool.events():
            if event.kind == "error":
                return {"error": event.reason}
            if event.kind == "facts":
                assert event.facts is not None
                found.update(facts=event.facts, components=event.components)
                pool.configure(namespace_id(build_fingerprint(event.facts)), frozenset())
            elif event.kind == "failed":
                found["error"] = event.reason
            elif event.kind == "done":
                result = event.result
                found["key"] = result.get("key")
                if result["status"] != "compiled":
                    found["error"] = result.get("reason", result["status"])
    finally:
        pool.close()
    return found


def prefill_check(topology: str | None = None, *, timeout: float = 600.0) -> dict[str, Any]:
    """Compile the probe here and deviceless for the same target; what each computed and whether they
    agree (``passed``). ``topology``: the TPU topology to compile for deviceless (default: this host's,
    read from its devices)."""
    with tempfile.TemporaryDirectory(prefix="xla-cache-prefill-check-") as scratch:
        live = _live(Path(scratch) / "live")
        target = topology if topology is not None else topology_name(live["facts"])
        if live["facts"].get("platform") == "tpu" and target is None:
            return {
                "live": live,
                "passed": False,
                "verdict": f"cannot name this TPU's topology ({live['facts'].get('device_kind')}): pass "
                "--topology",
            }
        deviceless = _deviceless(target, Path(scratch) / "deviceless", timeout)
    out: dict[str, Any] = {"topology": target, "live": live, "deviceless": deviceless}
    if "error" in deviceless:
        out.update(passed=False, verdict=f"the deviceless compile failed: {deviceless['error']}")
        return out
    namespaces = [namespace_id(build_fingerprint(side["facts"])) for side in (live, deviceless)]
    differing = differences(deviceless["components"], live["components"])
    same_key = live["key"] is not None and live["key"] == deviceless.get("key")
    out.update(
        namespaces=namespaces,
        differing=differing,
        same_key=same_key,
        passed=same_key and not differing and namespaces[0] == namespaces[1],
    )
    if out["passed"]:
        out["verdict"] = "a deviceless compile computes this host's namespace, key components and key"
    else:
        what = differing or (["the namespace"] if namespaces[0] != namespaces[1] else ["the key alone"])
        out["verdict"] = "they differ: " + "; ".join(what)
    return out
