"""A tiny deterministic workload (an MLP cut into chunks, random regression data) for numerics tests
and smoke runs of the pipeline runtimes; float64 so different execution orders agree to rounding."""

from __future__ import annotations

from dataclasses import dataclass

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


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


@dataclass(frozen=True)
class MLPWorkload:
    """``mlp_workload(chunks, microbatches, seed)`` as a ``runtime.pipedream.workload.Workload`` (same
    weights and data; the targets depend on ``microbatches``, as there)."""

    seed: int
    microbatches: int

    def chunk(self, index: int, chunks: int, device: torch.device) -> nn.Module:
        # The weights depend on construction order, so build all (they are tiny) and keep one.
        return mlp_workload(chunks, 0, self.seed)[0][index].to(device)

    def microbatch(self, k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        _, xs, ys = mlp_workload(0, self.microbatches, self.seed)
        return xs[k].to(device), ys[k].to(device)

    def boundary(self, chunks: int) -> tuple[tuple[int, ...], torch.dtype]:
        return (BATCH, WIDTH), torch.float64

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return mse(output, target)
