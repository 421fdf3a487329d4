"""What a pipeline runtime needs from a model: chunk modules, microbatches, the loss and the shape of
every activation crossing a chunk boundary.

The executors (``distributed``, ``bench``) build only the chunks a rank holds, so ``chunk`` must be
deterministic from the workload's seed alone (the same weights whichever rank, and whichever chunking,
builds them where the workload allows). Boundary shapes are fixed and known in advance because NCCL
point-to-point messages carry no header ([Narayanan] §2.4.4 ran pipeline traffic on gloo with headers;
on NCCL both sides must post matching buffers).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn


class Workload(Protocol):
    """A model cut into chunks plus synthetic data; must be picklable (it is sent to spawned ranks)."""

    seed: int

    def chunk(self, index: int, chunks: int, device: torch.device) -> nn.Module:
        """Chunk ``index`` of ``chunks`` (consecutive layers), built on ``device``."""
        ...

    def microbatch(self, k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(input of chunk 0, target for the loss) of microbatch ``k``."""
        ...

    def boundary(self, chunks: int) -> tuple[tuple[int, ...], torch.dtype]:
        """Shape and dtype of the activation between any two consecutive chunks (and of its gradient)."""
        ...

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Scalar loss of one microbatch from the last chunk's output."""
        ...
