"""FlexRR's training problem: a torch model (``runtime/flexrr/models.py``: MLR, one of FlexRR's
benchmarks (§3.4), an MLP, a CNN or the user's own) trained by SGD on a data set the scenario names.

The model's parameters travel as one flat vector (the order of ``module.parameters()``); the parameter
server shards that vector. Each item is a mini-batch of ``batch`` labelled examples (one by default);
processing items [a, b) of iteration k adds ``-lr / (items * batch) * sum of per-example gradients of the
cross-entropy at the model of iteration k`` to the iteration's update. Item ``i`` covers examples
``[i * batch, (i + 1) * batch)`` of a pool of ``pool`` examples, taken cyclically: with the default pool
(``items * batch``) every example is used once per iteration, like the paper's full pass over the input; a
smaller pool lets a GPU run have real compute per item (``batch`` in the thousands) without holding that
many distinct examples (the paper's MLR data set had 64k observations, §3.4).

The model every worker reads at iteration t is fixed by the consistency model, not by timing:
``W_t = W_0 + sum of U_k for k <= t - slack - 1`` (SSP's guarantee, §3.2.2, read exactly). So the final
model is the same whoever processed which item, which makes exactly-once processing checkable: it must
equal ``reference()`` up to floating-point summation order. The loss curve is a pure function of the
slack too, so iterations-to-target-loss of a real run can be checked against the serial replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from clustertwin.runtime.flexrr.models import DATA, MODELS, resolve

if TYPE_CHECKING:
    from clustertwin.scenarios.flexrr_schema import FlexRRScenario

EVAL_EXAMPLES = 4096  # the loss curve is measured on the first examples of the pool


@dataclass(frozen=True)
class Problem:
    items: int
    features: int = 16
    classes: int = 4
    lr: float = 0.5
    seed: int = 0
    batch: int = 1  # examples per item
    pool: int | None = None  # examples in the data set; None: items * batch
    dtype: str = "float64"
    model: str = "mlr"  # a name of runtime.flexrr.models.MODELS, or module:function
    data: str = "synthetic"  # a name of runtime.flexrr.models.DATA, or module:function
    hidden: int = 32

    @property
    def examples(self) -> int:
        return self.pool if self.pool is not None else self.items * self.batch

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def load(self, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """The data set, generated where it is used (a GPU worker does not spend seconds of one CPU
        thread on it); a pure function of the problem and of the device type."""
        loader = resolve(DATA, self.data)
        return loader(self.seed, self.examples, self.features, self.classes, self.torch_dtype, device)

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


class Trainer:
    """One process's copy of the problem: its data, its module and the flat initial parameters."""

    def __init__(self, problem: Problem, device: str | torch.device = "cpu") -> None:
        self.problem = problem
        self.x, self.y = problem.load(device)
        factory = resolve(MODELS, problem.model)
        with torch.random.fork_rng(devices=[]):  # the same initial model in every process
            torch.manual_seed(problem.seed)
            net = factory(tuple(self.x.shape[1:]), problem.classes, problem.hidden)
        self.net = net.to(dtype=problem.torch_dtype, device=device)
        self.shapes = [p.shape for p in self.net.parameters()]
        self.w0 = torch.cat([p.detach().reshape(-1) for p in self.net.parameters()])
        self._names = [name for name, _ in self.net.named_parameters()]

    @property
    def size(self) -> int:
        return int(self.w0.numel())

    def _logits(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        params, at = {}, 0
        for name, shape in zip(self._names, self.shapes, strict=True):
            n = shape.numel()
            params[name] = w[at : at + n].view(shape)
            at += n
        return torch.func.functional_call(self.net, params, (x,))

    def delta(self, w: torch.Tensor, a: int, b: int) -> torch.Tensor:
        """Update contributed by pool rows [a, b) at model ``w``, as a share of the iteration's pass."""
        p = self.problem
        leaf = w.detach().requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(
            self._logits(leaf, self.x[a:b]), self.y[a:b], reduction="sum"
        )
        (grad,) = torch.autograd.grad(loss, leaf)
        return -(p.lr / (p.items * p.batch)) * grad

    def delta_items(self, w: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Update contributed by items ``[start, end)``."""
        total: torch.Tensor | None = None
        for a, b in self.problem.pieces(start, end):
            part = self.delta(w, a, b)
            total = part if total is None else total + part
        return total if total is not None else torch.zeros_like(w)

    def loss(self, w: torch.Tensor) -> float:
        """Mean cross-entropy of model ``w`` over the first ``EVAL_EXAMPLES`` examples of the pool."""
        n = min(EVAL_EXAMPLES, len(self.y))
        with torch.no_grad():
            return float(torch.nn.functional.cross_entropy(self._logits(w, self.x[:n]), self.y[:n]))


def replay(problem: Problem, iterations: int, slack: int) -> list[torch.Tensor]:
    """The models ``W_0 .. W_iterations`` (each after that many complete iterations) under exact
    slack-``slack`` reads, computed serially: the reference a distributed run must match."""
    trainer = Trainer(problem)
    updates: list[torch.Tensor] = []
    for t in range(iterations):
        w = trainer.w0 + sum(updates[: max(0, t - slack)], torch.zeros_like(trainer.w0))
        updates.append(trainer.delta_items(w, 0, problem.items))
    out = [trainer.w0]
    for u in updates:
        out.append(out[-1] + u)
    return out


def reference(problem: Problem, iterations: int, slack: int) -> torch.Tensor:
    """The model after ``iterations`` iterations under exact slack-``slack`` reads, computed serially."""
    return replay(problem, iterations, slack)[-1]


def problem_for(scenario: FlexRRScenario, items: int) -> Problem:
    """The problem a scenario's real run trains (``real:`` block; ``items`` in total)."""
    rt = scenario.real
    return Problem(
        items=items,
        features=rt.features,
        classes=rt.classes,
        lr=rt.lr,
        seed=scenario.seed,
        batch=rt.batch,
        pool=rt.pool,
        dtype=rt.dtype,
        model=rt.model,
        data=rt.data,
        hidden=rt.hidden,
    )
