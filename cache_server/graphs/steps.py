"""Steps, not modules: the graphs of a report that one step of the job produced, told as one story.

torch_xla names a module by what it holds (``SyncTensorsGraph.53``), so one step traced at sizes that add
or drop an op (an empty slice left out of a ``torch.cat``, a whole one that needs no slice) is cut into
several modules, each a graph of its own in the index. Two graphs are one step when they share an input
shape (a shapes text, parameters and result), were not traced at two ``file:line`` (where both name one),
and their latest bodies' sized ops are the same kinds in the same order but for a few that one adds or
drops (:func:`~cache_server.graphs.baked.edge_ops`); graphs of one structure always are, and so are graphs
traced at one ``file:line`` (``XLA_HLO_DEBUG``, JAX's stack frames) whatever their ops.
:func:`group_steps` groups a report's graphs so (each graph compared with the first graph of each step
found so far, within :data:`STEP_COMPARISONS` pairs and :data:`STEP_ALIGNED_OPS` ops aligned) and ranks
the steps by the compile seconds paid, then the compiles. Pure functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cache_server.graphs.baked import EdgeOps, edge_ops
from cache_server.parsing.body import Body, short_source

__all__ = ["STEP_ALIGNED_OPS", "STEP_COMPARISONS", "Step", "StepGraph", "group_steps"]

STEP_COMPARISONS = 400  # pairs of graphs compared per report at most
# sized ops of the pairs of bodies aligned per report, both sides counted (an alignment costs up to ~2 ms
# where the bodies hold hundreds of ops: baked.MAX_MIDDLE_OPS): about 0.15 s of CPU at most
STEP_ALIGNED_OPS = 20_000


@dataclass(frozen=True)
class StepGraph:
    """What grouping knows of one graph: its module, cost (compile seconds and compiles paid), the shapes
    texts of the variants read, where it was traced (where known) and its latest body."""

    module: str
    compile_seconds: float
    compiles: int
    shapes: frozenset[str]
    source: str | None
    body: Body | None
    call_site: str | None = None  # the mark_step()/sync() line its runs compiled it at, where they said


@dataclass(frozen=True)
class Step:
    """Graphs one step produced: their modules (the costliest first, the report's order), what it paid in
    all, and what tells its modules apart: ``edge``, the ops a size adds or drops, where their bodies align
    so (the first pair that joined), and ``why`` in words (None for one module)."""

    modules: tuple[str, ...]
    compile_seconds: float
    compiles: int
    edge: EdgeOps | None = None
    why: str | None = None


def _same_step(a: StepGraph, b: StepGraph, budget: list[int]) -> tuple[bool, EdgeOps | None, str | None]:
    """Whether ``a`` and ``b`` are one step, the ops a size adds or drops between their bodies (where they
    align so) and why they are one, in words; an alignment is charged to ``budget`` (sized ops left to
    align), and not made past it. Graphs at one input shape traced at one ``file:line`` are one step
    whatever their ops (a size at an edge may turn an op into another: one row's ``gather`` a
    ``dynamic-slice``), and so are graphs at one input shape that the job's runs compiled at one
    ``mark_step()``/``sync()`` line (``call_site``: no debug setting needed); graphs traced or compiled at
    two lines are not."""
    if not a.shapes & b.shapes or a.body is None or b.body is None:
        return False, None, None
    if a.source and b.source and a.source != b.source:
        return False, None, None
    if a.call_site and b.call_site and a.call_site != b.call_site:
        return False, None, None
    if a.body.structure == b.body.structure:
        return True, None, "one structure under other names"
    found = None
    cost = len(a.body.ops) + len(b.body.ops)
    if cost <= budget[0]:
        budget[0] -= cost
        found = edge_ops(b.body, a.body)
    if found is not None:
        return True, found, found.describe()
    if a.source and a.source == b.source:
        return True, None, f"traced at one line ({short_source(a.source)}), a size there changes its ops"
    if a.call_site and a.call_site == b.call_site:
        return True, None, f"compiled by one sync at {a.call_site}, a size there changes its ops"
    return False, None, None


def group_steps(
    graphs: Sequence[StepGraph], *, comparisons: int = STEP_COMPARISONS, aligned: int = STEP_ALIGNED_OPS
) -> list[Step]:
    """``graphs`` (a report's, the costliest first) as steps, the costliest step first (compile seconds,
    then compiles, then the first module's place). A graph joins the first step whose first graph is of
    its step (:func:`_same_step`); past ``comparisons`` pairs compared, or ``aligned`` sized ops aligned,
    the rest are steps of their own."""
    members: list[list[int]] = []
    edges: list[tuple[EdgeOps | None, str | None]] = []
    left = comparisons
    budget = [aligned]
    for index, graph in enumerate(graphs):
        for place, group in enumerate(members):
            leader = graphs[group[0]]
            if left <= 0 or not leader.shapes & graph.shapes:
                continue
            left -= 1
            same, edge, why = _same_step(leader, graph, budget)
            if same:
                group.append(index)
                if edges[place][1] is None or (edges[place][0] is None and edge is not None):
                    edges[place] = (edge, why)
                break
        else:
            members.append([index])
            edges.append((None, None))
    steps = [
        Step(
            modules=tuple(graphs[i].module for i in group),
            compile_seconds=sum(graphs[i].compile_seconds for i in group),
            compiles=sum(graphs[i].compiles for i in group),
            edge=edge,
            why=why,
        )
        for group, (edge, why) in zip(members, edges, strict=True)
    ]
    order = sorted(range(len(steps)), key=lambda i: (-steps[i].compile_seconds, -steps[i].compiles, i))
    return [steps[i] for i in order]
