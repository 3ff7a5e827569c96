"""Which process of its job a run is: the ``process_index`` of its report.

Several processes of one job each report their own run (one per process: ranks that are threads of one
process share its run). Where the framework's distributed runtime is up (``jax.distributed``, a multi-host
torch_xla runtime: more than one process), the index is the framework's own. Otherwise the framework says
0 for every process, so the index is the launcher's rank: ``RANK`` (``torchrun``), else ``SLURM_PROCID``
(``srun``), else ``LOCAL_RANK``, else ``PJRT_LOCAL_PROCESS_RANK`` (set by torch_xla's ``xmp.spawn`` in each
process it starts), else the number ``multiprocessing`` gave a child it started (1, 2, ...; the parent is
0), else 0.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from cache_protocol.runs import MAX_PROCESS_INDEX

__all__ = ["RANK_VARIABLES", "launcher_rank", "process_index"]

RANK_VARIABLES = ("RANK", "SLURM_PROCID", "LOCAL_RANK", "PJRT_LOCAL_PROCESS_RANK")
"""The launchers' variables naming a process's rank, the first set one wins."""


def _child_number() -> int | None:
    """The number ``multiprocessing`` gave this process when it started it (None: not its child)."""
    multiprocessing = sys.modules.get("multiprocessing")  # a child of it has imported it
    if multiprocessing is None:
        return None
    identity = getattr(multiprocessing.current_process(), "_identity", ())
    return int(identity[-1]) if identity else None


def launcher_rank(env: Mapping[str, str] | None = None) -> int | None:
    """This process's rank as its launcher set it (:data:`RANK_VARIABLES`, then the ``multiprocessing``
    child's number), or None when no launcher started it."""
    env = os.environ if env is None else env
    for name in RANK_VARIABLES:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return _child_number()


def process_index(framework_index: int | None, env: Mapping[str, str] | None = None) -> int:
    """The index a run report carries: ``framework_index`` (the framework's, None where its runtime has one
    process), else :func:`launcher_rank`, else 0; within the protocol's bounds."""
    index = framework_index if framework_index is not None else launcher_rank(env)
    return max(0, min(int(index or 0), MAX_PROCESS_INDEX))
