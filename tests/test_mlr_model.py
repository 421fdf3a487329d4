"""The MLR numerics shared by FlexRR's and AgileML's real runs."""

from __future__ import annotations

import torch
from clustertwin.runtime.models import mlr


def test_update_is_the_sgd_step_on_the_summed_cross_entropy() -> None:
    x, y = mlr.synthetic_data(seed=3, examples=40, features=5, classes=4)
    w = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    w_grad = w.clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(x @ w_grad, y, reduction="sum").backward()
    torch.testing.assert_close(mlr.update(x, y, w, lr=0.5, normaliser=8), -(0.5 / 8) * w_grad.grad)


def test_steps_lower_the_loss() -> None:
    x, y = mlr.synthetic_data(seed=0, examples=200, features=8, classes=3)
    w = torch.zeros(8, 3, dtype=torch.float64)
    before = mlr.loss(x, y, w)
    for _ in range(20):
        w = w + mlr.update(x, y, w, lr=0.5, normaliser=len(y))
    assert mlr.loss(x, y, w) < 0.8 * before


def test_data_is_a_function_of_the_seed() -> None:
    a, b, c = (mlr.synthetic_data(seed, 30, 4, 3, torch.float32) for seed in (7, 7, 8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    assert a[0].dtype == torch.float32 and a[1].shape == (30,) and int(a[1].max()) < 3
