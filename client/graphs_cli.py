"""``xla-cache graphs``: which dimensions of a namespace's graphs vary, and what padding them would save.

It prints the server's bucketing report (``GET /admin/graphs``): for each graph with the most shape
variants, the parameter dimensions that vary (``p1.d0``: parameter 1, dimension 0; from what to what, how
many sizes) and, for each padding scheme, the compilations left and the mean padding overhead (extra
elements / real elements of the padded parameters). Needs an admin token, or one limited to namespace
patterns that cover the namespace.
"""

from __future__ import annotations

import argparse
from typing import Any

from client.api import CacheApi
from client.cli_common import add_common, add_framework, config_of, emit, runtime_fingerprint, server_of
from client.deadline import Deadline
from client.fingerprint import namespace_id

__all__ = ["add_graphs_command", "cmd_graphs", "graph_lines"]


def _dimension(dim: dict[str, Any]) -> str:
    return f"{dim['label']} ({dim['min']}..{dim['max']}, {dim['count']} values)"


def _scheme(scheme: dict[str, Any]) -> str:
    return f"{scheme['scheme']}: {scheme['variants']} (+{scheme['mean_overhead']:.0%})"


def graph_lines(report: dict[str, Any]) -> list[str]:
    """The report as lines: one per graph, and a line of notes under a graph when some were left out."""
    graphs = report["graphs"]
    if not graphs:
        return [f"namespace {report['namespace']}: no parsed graphs (TPU executables cannot be read)"]
    width = max(len(g["module"]) for g in graphs)
    lines = [
        f"namespace {report['namespace']}: compilations left by padding every varying dimension "
        "(+mean padding overhead)"
    ]
    for graph in graphs:
        varying = ", ".join(_dimension(d) for d in graph["varying"]) or "none"
        schemes = "  ".join(_scheme(s) for s in graph["schemes"])
        plural = "" if graph["variants"] == 1 else "s"
        lines.append(
            f"{graph['module']:<{width}}  {graph['variants']} variant{plural}  varying: {varying}  {schemes}"
        )
        notes = []
        if graph["read"] < graph["variants"]:
            notes.append(f"analysed {graph['read']} of its {graph['variants']} variants (a sample)")
        if graph["other_layouts"]:
            notes.append(f"{graph['other_layouts']} with another parameter layout, each counted as one")
        if notes:
            lines.append(f"{'':<{width}}  ({'; '.join(notes)})")
    return lines


def cmd_graphs(args: argparse.Namespace) -> int:
    """The bucketing report of a namespace (default: this runtime's)."""
    namespace = args.namespace or namespace_id(runtime_fingerprint(args))
    config = config_of(args)
    api = CacheApi(server_of(config), config.token)
    try:
        report = api.admin_graphs(namespace, Deadline(args.timeout), top=args.top)
    finally:
        api.close()
    emit(args, report, graph_lines(report))
    return 0


def add_graphs_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``graphs`` on ``xla-cache``'s subparsers."""
    graphs = sub.add_parser(
        "graphs", help="which dimensions of the namespace's graphs vary, and what bucketing would save"
    )
    add_common(graphs, timeout=30.0)
    graphs.add_argument("namespace", nargs="?", help="namespace (default: this runtime's)")
    graphs.add_argument("--top", type=int, default=10, help="graphs listed, most variants first (default 10)")
    add_framework(graphs)
    graphs.set_defaults(func=cmd_graphs)
