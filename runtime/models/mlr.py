"""Multinomial logistic regression (MLR) on synthetic data: a benchmark of FlexRR ("Addressing the
straggler problem for iterative convergent parallel ML"; Harlap's dissertation §3.4) and the MLR app of
AgileML ("Proteus: agile ML elasticity through tiered reliability in dynamic resource markets", §3).

Weights are a ``features × classes`` matrix; an update is a plain SGD step on the softmax cross-entropy.
Each kind decides which examples make up a step and how it normalises the step (FlexRR: by the
examples of a whole iteration; AgileML: by the global batch of a clock); the numerics are these.
"""

from __future__ import annotations

import torch


def synthetic_data(
    seed: int,
    examples: int,
    features: int,
    classes: int,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Separable-ish labelled examples ``(x, y)``: the label is the argmax of a random linear map of
    ``x`` plus noise. A pure function of its arguments (CPU and CUDA generators draw different streams,
    so of the device type too)."""
    g = torch.Generator(device=device).manual_seed(seed)
    kw = {"generator": g, "dtype": dtype, "device": device}
    truth = torch.randn(features, classes, **kw)
    x = torch.randn(examples, features, **kw)
    y = torch.argmax(x @ truth + 0.5 * torch.randn(examples, classes, **kw), 1)
    return x, y


def update(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, lr: float, normaliser: int) -> torch.Tensor:
    """``-lr / normaliser ×`` the sum of the softmax cross-entropy gradients of examples ``(x, y)`` at
    weights ``w`` (same shape as ``w``)."""
    p = torch.softmax(x @ w, dim=1)
    p[torch.arange(len(y), device=p.device), y] -= 1.0
    return -(lr / normaliser) * (x.T @ p)


def loss(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> float:
    """Mean softmax cross-entropy of weights ``w`` over examples ``(x, y)``."""
    return float(torch.nn.functional.cross_entropy(x @ w, y))
