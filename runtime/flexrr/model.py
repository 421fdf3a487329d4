"""FlexRR's training problem: multinomial logistic regression (MLR, one of FlexRR's benchmarks, §3.4) on
synthetic data (the numerics: ``runtime/models/mlr.py``).

Each item is a mini-batch of ``batch`` labelled examples (one example by default); processing items
[a, b) of iteration k adds ``-lr / (items * batch) * sum of per-example gradients at the model of
iteration k`` to the iteration's update. Item ``i`` covers examples ``[i * batch, (i + 1) * batch)`` of a
pool of ``pool`` examples, taken cyclically: with the default pool (``items * batch``) every example is
used once per iteration, like the paper's full pass over the input; a smaller pool lets a GPU run have
real compute per item (``batch`` in the thousands) without holding that many distinct examples (the
paper's MLR data set had 64k observations, §3.4).

The model every worker reads at iteration t is fixed by the consistency model, not by timing:
``W_t = W_0 + sum of U_k for k <= t - slack - 1`` (SSP's guarantee, §3.2.2, read exactly). So the final
model is the same whoever processed which item, which makes exactly-once processing checkable: it must
equal ``reference()`` up to floating-point summation order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from clustertwin.runtime.models import mlr

if TYPE_CHECKING:
    from clustertwin.scenarios.flexrr_schema import FlexRRScenario


@dataclass(frozen=True)
class MLRProblem:
    items: int
    features: int = 16
    classes: int = 4
    lr: float = 0.5
    seed: int = 0
    batch: int = 1  # examples per item
    pool: int | None = None  # examples in the data set; None: items * batch
    dtype: str = "float64"

    @property
    def examples(self) -> int:
        return self.pool if self.pool is not None else self.items * self.batch

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def data(self, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Synthetic, separable-ish data, a pure function of the seed (and of the device type: CPU and
        CUDA generators draw different streams). Generated where it is used, so a GPU worker does not
        spend seconds of one CPU thread on it."""
        return mlr.synthetic_data(
            self.seed, self.examples, self.features, self.classes, self.torch_dtype, device
        )

    def initial(self, device: str | torch.device = "cpu") -> torch.Tensor:
        return torch.zeros(self.features, self.classes, dtype=self.torch_dtype, device=device)

    def pieces(self, start: int, end: int) -> list[tuple[int, int]]:
        """The contiguous pool rows ``[a, b)`` that items ``[start, end)`` cover, in order (a range
        wraps around the pool's end as often as it needs)."""
        out = []
        pos = (start * self.batch) % self.examples
        left = (end - start) * self.batch
        while left > 0:
            take = min(left, self.examples - pos)
            out.append((pos, pos + take))
            left -= take
            pos = 0
        return out


def delta(problem: MLRProblem, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Update contributed by examples (x, y) at model w, as a share of the iteration's full pass."""
    return mlr.update(x, y, w, problem.lr, problem.items * problem.batch)


def delta_items(
    problem: MLRProblem, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, start: int, end: int
) -> torch.Tensor:
    """Update contributed by items ``[start, end)`` (their examples in the pool ``x``, ``y``)."""
    total: torch.Tensor | None = None
    for a, b in problem.pieces(start, end):
        part = delta(problem, x[a:b], y[a:b], w)
        total = part if total is None else total + part
    return total if total is not None else torch.zeros_like(w)


def reference(problem: MLRProblem, iterations: int, slack: int) -> torch.Tensor:
    """The model after ``iterations`` iterations under exact slack-``slack`` reads, computed serially."""
    x, y = problem.data()
    w0 = problem.initial()
    updates: list[torch.Tensor] = []
    for t in range(iterations):
        w = w0 + sum(updates[: max(0, t - slack)], torch.zeros_like(w0))
        updates.append(delta_items(problem, x, y, w, 0, problem.items))
    return w0 + sum(updates, torch.zeros_like(w0))


def problem_for(scenario: FlexRRScenario, items: int) -> MLRProblem:
    """The MLR problem a scenario's real run trains (``real:`` block; ``items`` in total)."""
    rt = scenario.real
    return MLRProblem(
        items=items,
        features=rt.features,
        classes=rt.classes,
        lr=rt.lr,
        seed=scenario.seed,
        batch=rt.batch,
        pool=rt.pool,
        dtype=rt.dtype,
    )
