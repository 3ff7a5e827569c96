"""The steps the prefill tests compile ahead of time and the jobs then run (importable by both: the
prefill names them ``tests.prefill.steps:step``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

WIDTH = 8


def _step(x: Any) -> Any:
    return jnp.tanh(x @ x.T).sum(axis=0) * 2.0 + 1.0


step = jax.jit(_step)
"""A jitted step, as a job holds it: one graph, a new shape per batch size."""


def calls(sizes: range) -> list[list[dict[str, Any]]]:
    """The calls of ``step`` at these batch sizes, as a specs file lists them."""
    return [[{"shape": [n, WIDTH], "dtype": "float32"}] for n in sizes]


def model() -> Any:
    """The torchax job's model (tests/prefill/torchax_step_job.py): what it passes to torchax.compile."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
