"""Multinomial logistic regression (MLR, one of FlexRR's benchmarks, §3.4) on synthetic data.

Each item is one labelled example; processing items [a, b) of iteration k adds
``-lr / total_items * sum of per-example gradients at the model of iteration k`` to the iteration's update.
The model every worker reads at iteration t is fixed by the consistency model, not by timing:
``W_t = W_0 + sum of U_k for k <= t - slack - 1`` (SSP's guarantee, §3.2.2, read exactly). So the final
model is the same whoever processed which item, which makes exactly-once processing checkable: it must
equal ``reference()`` up to floating-point summation order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MLRProblem:
    items: int
    features: int = 16
    classes: int = 4
    lr: float = 0.5
    seed: int = 0

    def data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Synthetic, separable-ish data, a pure function of the seed."""
        g = torch.Generator().manual_seed(self.seed)
        truth = torch.randn(self.features, self.classes, generator=g, dtype=torch.float64)
        x = torch.randn(self.items, self.features, generator=g, dtype=torch.float64)
        y = torch.argmax(
            x @ truth + 0.5 * torch.randn(self.items, self.classes, generator=g, dtype=torch.float64), 1
        )
        return x, y

    def initial(self) -> torch.Tensor:
        return torch.zeros(self.features, self.classes, dtype=torch.float64)


def delta(problem: MLRProblem, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Update contributed by examples (x, y) at model w (softmax cross-entropy gradient step)."""
    p = torch.softmax(x @ w, dim=1)
    p[torch.arange(len(y)), y] -= 1.0
    return -(problem.lr / problem.items) * (x.T @ p)


def loss(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> float:
    return float(torch.nn.functional.cross_entropy(x @ w, y))


def reference(problem: MLRProblem, iterations: int, slack: int) -> torch.Tensor:
    """The model after ``iterations`` iterations under exact slack-``slack`` reads, computed serially."""
    x, y = problem.data()
    w0 = problem.initial()
    updates: list[torch.Tensor] = []
    for t in range(iterations):
        w = w0 + sum(updates[: max(0, t - slack)], torch.zeros_like(w0))
        updates.append(delta(problem, x, y, w))
    return w0 + sum(updates, torch.zeros_like(w0))
