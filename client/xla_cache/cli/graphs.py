"""``xla-cache graphs``: which dimensions of a namespace's graphs vary, and what padding them would save.

It prints the server's bucketing report (``GET /admin/graphs``): for each graph with the most shape
variants, the parameter dimensions that vary (``p1.d0``: parameter 1, dimension 0; from what to what, how
many sizes), for each the ways to pad it alone (as is, pow2, multiples, the best K boundaries, the
maximum) with the compilations left and the mean padding overhead (extra bytes / real bytes of the padded
parameters), the best combinations (fewest compilations for a padding budget) and each rounding applied to
every dimension. Needs a read token (or stronger) that reaches the namespace, as the dashboard's graph view.
"""

from __future__ import annotations

import argparse
from typing import Any

from xla_cache.cli.common import (
    add_common,
    add_runtime,
    admin_api,
    config_of,
    emit,
    namespace_name,
    namespace_of,
    no_namespace_help,
)
from xla_cache.errors import ClientError
from xla_cache.http.deadline import Deadline

__all__ = ["add_graphs_command", "cmd_graphs", "graph_lines"]


def _percent(ratio: float) -> str:
    """``+3.3%``, ``+41%``: a tenth of a percent below 10 %."""
    return f"+{ratio:.1%}" if ratio < 0.1 else f"+{ratio:.0%}"


def _dimension(dim: dict[str, Any]) -> str:
    return f"{dim['label']} ({dim['min']}..{dim['max']}, {dim['count']} values)"


def _choice(choice: dict[str, Any]) -> str:
    """``pow2 45 (+3.1%)``, ``buckets4[4,8,12,20] 30 (+5%)``, ``max(20) 9 (+120%)``: compilations left."""
    name = choice["name"]
    if choice["name"] == "max":
        name = f"max({choice['boundaries'][0]})"
    elif choice["boundaries"]:
        name += "[" + ",".join(str(b) for b in choice["boundaries"]) + "]"
    if choice["name"] == "as is":
        return f"as is {choice['compiles']}"
    return f"{name} {choice['compiles']} ({_percent(choice['mean_overhead'])})"


def _scheme(scheme: dict[str, Any]) -> str:
    return f"{scheme['scheme']}: {scheme['variants']} ({_percent(scheme['mean_overhead'])})"


def cost_columns(graph: dict[str, Any]) -> str:
    """A graph's cost (the order it is listed in) and its variants, as a column: ``61.2 s compiling, 83
    compiles, 1 variant``."""
    plural = "" if graph["variants"] == 1 else "s"
    compiles = "" if graph["entries"] == 1 else "s"
    return (
        f"{graph.get('compile_seconds', 0.0):.1f} s compiling, {graph['entries']} compile{compiles}, "
        f"{graph['variants']} variant{plural}"
    )


def graph_lines(report: dict[str, Any]) -> list[str]:
    """The report as lines: per graph a title line, then per varying dimension its choices (each alone:
    compilations left, +mean overhead), the frontier of combinations, and each rounding applied to all."""
    graphs = report["graphs"]
    footnotes = [  # (an older server sends none)
        f"  {n:,} {'entry' if n == 1 else 'entries'} without a graph: {group['reason']}"
        for group in report.get("unparseable") or []
        for n in [int(group["entries"])]
    ]
    prefilled = int(report.get("prefilled_entries") or 0)  # (an older server sends none)
    if prefilled:
        unverified = int(report.get("prefilled_unverified") or 0)
        note = f" ({unverified:,} unverified: no real run checked their target)" if unverified else ""
        footnotes.append(
            f"  {prefilled:,} {'entry' if prefilled == 1 else 'entries'} prefilled (compiled ahead of the "
            f"target job){note}"
        )
    if not graphs:
        namespace = report["namespace"]
        return [
            f"namespace {namespace}: no parsed graphs (yet: entries are parsed in the background)",
            *footnotes,
        ]
    cost = next((g["cost"] for g in graphs if g.get("cost")), "bytes of the padded parameters")
    lines = _step_lines(report.get("steps") or [], report["namespace"])  # (an older server sends none)
    lines.append(
        f"namespace {report['namespace']}: for each varying dimension, the compilations left by padding it "
        f"alone (+mean extra {cost}), then the best combinations"
    )
    for graph in graphs:
        title = f"{graph['module']}  {cost_columns(graph)}"
        if graph.get("unchanged"):
            title += f"  {graph['unchanged']}"
        elif not graph["varying"]:
            title += "  varying: none"
        notes = []
        if graph["read"] < graph["variants"]:
            notes.append(f"analysed {graph['read']} of its {graph['variants']} variants (a sample)")
        if graph["other_layouts"]:
            notes.append(f"{graph['other_layouts']} with another parameter layout, each counted as one")
        if graph.get("result_only") and not graph.get("unchanged"):
            notes.append(f"{graph['result_only']} differing only in the result, each counted as one")
        if notes:
            title += f"  ({'; '.join(notes)})"
        lines.append(title)
        sources = graph.get("sources") or []  # (an older server sends none)
        if sources:
            line = "  compiled at " + ", ".join(f"{s['source']} ({s['entries']})" for s in sources)
            counted = graph.get("sources_counted") or graph["entries"]
            if counted < graph["entries"]:
                line += f" (counted over {counted:,} of its {graph['entries']:,} entries)"
            lines.append(line)
        if graph.get("summary"):
            lines.append(f"  what to do: {graph['summary']}")
        for dim in graph["varying"]:
            lines.append(f"  {_dimension(dim)}: " + "  ".join(_choice(c) for c in dim.get("choices", [])))
        lines.extend(_frontier_lines(graph.get("frontier") or [], graph.get("result_cost") is not None, "  "))
        if graph["schemes"]:
            lines.append(
                "  one rounding for every dimension: " + "  ".join(_scheme(s) for s in graph["schemes"])
            )
        baked = graph.get("baked_sizes")
        if baked:
            lines.extend(_baked_lines(baked, said=graph.get("summary")))
    return [*lines, *footnotes]


def _step_lines(steps: list[dict[str, Any]], namespace: str) -> list[str]:
    """The steps first, the costliest first: each its cost, its modules, what varies and what to do."""
    if not steps:
        return []
    lines = [f"namespace {namespace}: its steps, the costliest first (compile seconds paid, then compiles)"]
    for place, step in enumerate(steps, 1):
        modules = step["modules"]
        named = modules[0] if len(modules) == 1 else f"{len(modules)} modules: " + ", ".join(modules)
        columns = cost_columns(
            {
                "compile_seconds": step["compile_seconds"],
                "entries": step["compiles"],
                "variants": step["variants"],
            }
        )
        lines.append(f"  {place}. {named}  {columns}")
        if step.get("varies"):
            lines.append("     varies: " + "; ".join(step["varies"]))
        if step.get("fix"):
            lines.append(f"     what to do: {step['fix']}")
    return lines


def _frontier_lines(frontier: list[dict[str, Any]], results: bool, indent: str) -> list[str]:
    """The best combinations: compilations, +mean / +largest overhead (and in result bytes), which."""
    if not frontier:
        return []
    lines = [
        f"{indent}best combinations (compilations, +mean / +largest overhead"
        + (", then in bytes of the padded results" if results else "")
        + "):"
    ]
    width = max(len(str(c["compiles"])) for c in frontier)
    overheads = []
    for combo in frontier:
        overhead = f"({_percent(combo['mean_overhead'])} / {_percent(combo['max_overhead'])})"
        if results and combo.get("result_mean_overhead") is not None:
            overhead += (
                f" results ({_percent(combo['result_mean_overhead'])} / "
                f"{_percent(combo['result_max_overhead'])})"
            )
        overheads.append(overhead)
    room = max(18, *map(len, overheads))
    for combo, overhead in zip(frontier, overheads, strict=True):
        lines.append(f"{indent}  {combo['compiles']:>{width}} {overhead:<{room}} {combo['description']}")
    return lines


def _baked_lines(baked: dict[str, Any], said: str | None = None) -> list[str]:
    """Sizes baked into the graph: what to do (unless the graph's line ``said`` it), each size with its
    values and choices (those that change nothing padded alone on one line), then the best combinations."""
    lines = [
        f"  sizes baked into the graph: {baked['entries']} entries at the same input shapes "
        f"{baked['params']} differ only in these (+mean extra {baked['cost']}); pass them as data, pad "
        "them, or run the section eagerly:"
    ]
    if baked.get("summary") and baked["summary"] != said:  # (an older server sends none)
        lines.append(f"    what to do: {baked['summary']}")
    unchanged: list[dict[str, Any]] = []
    for size in baked["sizes"]:
        choices = size.get("choices", [])
        if len(choices) > 1 and len({c["compiles"] for c in choices}) == 1:
            unchanged.append(size)  # padding it alone changes nothing: one line for all such sizes
            continue
        follows = f", {size['folded']} more move with it" if size.get("folded") else ""
        shown = ",".join(str(v) for v in size["values"][:12]) + (",…" if size["count"] > 12 else "")
        lines.append(
            f"    {size['label']}: {size['count']} values {shown} ({size['min']}..{size['max']}{follows})"
        )
        lines.append("      " + "  ".join(_choice(c) for c in choices))
    if unchanged:
        left = unchanged[0]["choices"][0]["compiles"]
        named = ", ".join(size["label"] for size in unchanged[:3]) + (", …" if len(unchanged) > 3 else "")
        lines.append(
            f"    {len(unchanged)} size{'' if len(unchanged) == 1 else 's'} padded alone change nothing "
            f"({left} compile{'' if left == 1 else 's'} left: the other sizes still differ): {named}"
        )
    lines.extend(_frontier_lines(baked.get("frontier") or [], False, "    "))
    return lines


def cmd_graphs(args: argparse.Namespace) -> int:
    """The bucketing report of a namespace (default: the one the last warm here recorded)."""
    config = config_of(args)
    chosen = namespace_of(args, config)
    if chosen is None:
        raise ClientError(no_namespace_help(config))
    with admin_api(config) as api:
        report = api.admin_graphs(chosen.name, Deadline(args.timeout), top=args.top, module=args.module)
    lines = graph_lines(report)
    if chosen.how != "as named":
        lines.insert(0, f"namespace {chosen.name} ({chosen.how})")
    emit(args, report, lines)
    return 0


def add_graphs_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``graphs`` on ``xla-cache``'s subparsers."""
    graphs = sub.add_parser(
        "graphs", help="which dimensions of the namespace's graphs vary, and what bucketing would save"
    )
    add_common(graphs, timeout=30.0)
    graphs.add_argument(
        "namespace",
        nargs="?",
        type=namespace_name,
        help="namespace (default: the one the last warm here recorded)",
    )
    graphs.add_argument(
        "--top",
        type=int,
        default=10,
        help="graphs listed, the costliest first: compile seconds paid, then compiles (default 10)",
    )
    graphs.add_argument("--module", help="only this graph (HLO module), as `xla-cache runs RUN` names it")
    add_runtime(graphs)
    graphs.set_defaults(func=cmd_graphs)
