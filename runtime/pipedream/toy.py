"""A tiny deterministic workload (an MLP cut into chunks, random regression data) for numerics tests
and smoke runs of the pipeline runtimes; float64 so different execution orders agree to rounding."""

from __future__ import annotations

import torch
from torch import nn

WIDTH = 6
BATCH = 3


def mlp_workload(
    chunks: int, microbatches: int, seed: int
) -> tuple[list[nn.Module], list[torch.Tensor], list[torch.Tensor]]:
    """``chunks`` Linear+Tanh modules and ``microbatches`` (input, target) pairs, all from ``seed``."""
    torch.manual_seed(seed)
    modules: list[nn.Module] = [
        nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()).double() for _ in range(chunks)
    ]
    g = torch.Generator().manual_seed(seed + 1)
    xs = [torch.randn(BATCH, WIDTH, generator=g, dtype=torch.float64) for _ in range(microbatches)]
    ys = [torch.randn(BATCH, WIDTH, generator=g, dtype=torch.float64) for _ in range(microbatches)]
    return modules, xs, ys
