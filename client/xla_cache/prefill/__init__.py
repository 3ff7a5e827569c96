"""Prefill: compile a JAX or torchax function for many argument shapes on CPU hosts, before the accelerator
starts, and upload the entries into the namespace the target job will compute (issue 44).

- :mod:`.run`: :func:`prefill` (the whole of it) and its :class:`PrefillSummary`
- :mod:`.specs`: the calls (argument shapes, dtypes, shardings) and the specs file
- :mod:`.pool`: the worker processes (spawned, bounded in number and memory)
- :mod:`.worker`: one worker: the target's facts, then compile after compile
- :mod:`.components`: the target's facts and JAX key components without the target; comparing with a run
"""

from __future__ import annotations

from xla_cache.prefill.run import PrefillError, PrefillRefused, PrefillSummary, prefill
from xla_cache.prefill.specs import SpecsError, load_specs

__all__ = ["PrefillError", "PrefillRefused", "PrefillSummary", "SpecsError", "load_specs", "prefill"]
