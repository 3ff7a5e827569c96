"""``xla-cache prefill``: compile a JAX or torchax function for each set of argument shapes in a specs file,
in worker processes on this host (for this host's devices, or a TPU topology deviceless), and upload the
entries into the namespace the target job will warm from (:func:`xla_cache.prefill.prefill`).

Exit status: 0 when every call is in the namespace (compiled now or stored already), 1 when some failed
(the summary says why), 2 when the prefill could not run or refused to publish.
"""

from __future__ import annotations

import argparse
import os
import sys

from xla_cache.cli.common import add_common, config_of, emit, progress_of

__all__ = ["add_prefill_command", "cmd_prefill"]


def cmd_prefill(args: argparse.Namespace) -> int:
    from xla_cache.prefill import PrefillError, load_specs, prefill

    if (args.specs is None) == (args.from_namespace is None):
        raise PrefillError("give the calls: --specs FILE, or --from NAMESPACE (the shapes its runs compiled)")
    if args.module is not None and args.from_namespace is None:
        raise PrefillError("--module chooses the graph of --from NAMESPACE; give --from too")
    specs = load_specs(args.specs) if args.specs is not None else None
    function = args.function or (specs.function if specs is not None else None)
    if not function:
        raise PrefillError("name the function to compile (module:function), here or in the specs file")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as python -m does: the module may be the directory's own
    config = config_of(args)
    env = dict(os.environ)
    if args.accelerator_type:  # the target's, as its fingerprint records it (TPU_ACCELERATOR_TYPE)
        env["TPU_ACCELERATOR_TYPE"] = args.accelerator_type
    summary = prefill(
        function,
        specs.calls if specs is not None else None,
        from_namespace=args.from_namespace,
        module=args.module,
        topology=args.topology,
        framework=args.framework,
        server=config.server or "none",
        token=config.token,
        workers=args.workers,
        memory_mib=args.memory_mib,
        call_timeout=args.call_timeout,
        calls_per_worker=args.calls_per_worker,
        unverified=args.unverified,
        timeout=args.timeout,
        progress=progress_of(args),
        env=env,
    )
    emit(args, summary.as_dict(), summary.lines())
    return 1 if summary.failed else 0


def add_prefill_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register prefill on ``xla-cache``'s subparsers."""
    parser = sub.add_parser(
        "prefill",
        help="compile a JAX or torchax function for many shapes here and upload into the target's namespace",
        description="Compile FUNCTION for each call of the specs file (or each shape a namespace's runs "
        "compiled: --from) in worker processes on this host (for its own devices, or --topology "
        "deviceless) and upload the entries into the namespace the target job computes; skips what the "
        "namespace holds.",
    )
    parser.add_argument(
        "function",
        nargs="?",
        help="module:function (jitted or not; torchax: a function making the torch.nn.Module); default: "
        "the specs file's",
    )
    parser.add_argument("--specs", help="JSON file of the calls' argument shapes (docs/prefill.md)")
    parser.add_argument(
        "--from",
        dest="from_namespace",
        metavar="NAMESPACE",
        help="instead of --specs: the shapes this namespace's runs compiled, as the server parsed them "
        "(JAX; no shardings)",
    )
    parser.add_argument(
        "--module",
        help="with --from: the graph (HLO module) whose variants to compile (default: jit_FUNCTION, or "
        "the namespace's only graph)",
    )
    parser.add_argument(
        "--topology", help="compile for this TPU topology deviceless, such as v5e:2x2 (needs libtpu here)"
    )
    parser.add_argument(
        "--accelerator-type",
        help="the target's TPU_ACCELERATOR_TYPE where its environment sets one (v5litepod-4): part of its "
        "namespace",
    )
    parser.add_argument("--framework", choices=["jax", "torchax"], default="jax", help="default jax")
    parser.add_argument("--workers", type=int, help="worker processes at once (default: the CPUs)")
    parser.add_argument(
        "--memory-mib", type=float, default=4096.0, help="kill a worker over this resident memory (4096)"
    )
    parser.add_argument(
        "--call-timeout", type=float, default=600.0, help="kill a worker compiling one call longer (600 s)"
    )
    parser.add_argument(
        "--calls-per-worker", type=int, default=200, help="replace a worker after this many calls (200)"
    )
    parser.add_argument(
        "--unverified",
        action="store_true",
        help="publish although the namespace has no real run to compare the target with (marked so)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_common(parser, timeout=60.0)
    parser.set_defaults(func=cmd_prefill)
