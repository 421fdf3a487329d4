"""The job: multinomial logistic regression (the Proteus paper's MLR app, [Proteus] §3) on synthetic data
(the numerics: ``runtime/models/mlr.py``).

The parameters are one flat float64 vector (a ``features × classes`` weight matrix) cut into N fixed
contiguous partitions (AgileML's partitions, [Proteus] §1.4). One *clock* is one SGD step on a global
batch of ``batch`` examples, the same examples whoever computes them; each live worker computes the
update of its share of the batch, and a partition's server applies the sum of the shares. Because the
update of clock c depends only on the model at clock c and the batch, the model after C clocks is a
pure function of C: :func:`reference` replays it serially, which is what "no acknowledged update lost,
none applied twice" is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from clustertwin.runtime.models import mlr


@dataclass(frozen=True)
class MLR:
    """Problem size and learning rate; data is a pure function of ``seed``."""

    features: int
    classes: int
    examples: int
    batch: int
    lr: float
    seed: int = 0

    @property
    def numel(self) -> int:
        return self.features * self.classes

    def data(self) -> tuple[torch.Tensor, torch.Tensor]:
        return mlr.synthetic_data(self.seed, self.examples, self.features, self.classes)

    def batch_indices(self, clock: int) -> np.ndarray:
        """The examples of clock ``clock``'s global batch (a sliding window over the data)."""
        return (clock * self.batch + np.arange(self.batch)) % self.examples


def partition_bounds(numel: int, n: int) -> list[tuple[int, int]]:
    """[lo, hi) of each of the ``n`` contiguous partitions of a ``numel`` vector."""
    edges = np.linspace(0, numel, n + 1).round().astype(int)
    return [(int(edges[i]), int(edges[i + 1])) for i in range(n)]


def share_bounds(batch: int, workers: int, index: int) -> tuple[int, int]:
    """[lo, hi) of worker number ``index``'s share of a ``batch``-example global batch."""
    edges = np.linspace(0, batch, workers + 1).round().astype(int)
    return int(edges[index]), int(edges[index + 1])


def update(problem: MLR, x: torch.Tensor, y: torch.Tensor, w_flat: torch.Tensor) -> torch.Tensor:
    """−lr/batch × Σ softmax-cross-entropy gradients of (x, y) at ``w_flat`` (flat, like ``w_flat``)."""
    w = w_flat.view(problem.features, problem.classes)
    return mlr.update(x, y, w, problem.lr, problem.batch).reshape(-1)


def loss(problem: MLR, w_flat: np.ndarray) -> float:
    """Mean cross-entropy of ``w_flat`` over all examples."""
    x, y = problem.data()
    return mlr.loss(x, y, torch.from_numpy(np.asarray(w_flat)).view(problem.features, problem.classes))


def reference(problem: MLR, clocks: int) -> np.ndarray:
    """The model after ``clocks`` clocks, computed serially from zeros."""
    x, y = problem.data()
    w = torch.zeros(problem.numel, dtype=torch.float64)
    for c in range(clocks):
        idx = torch.from_numpy(problem.batch_indices(c))
        w = w + update(problem, x[idx], y[idx], w)
    return w.numpy()
