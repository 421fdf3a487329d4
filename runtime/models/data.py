"""Synthetic data sets for real runs: deterministic, learnable, and cheap to make on any host.

A data set is a function ``(seed, examples) -> (x, y)`` of labelled examples; a worker's minibatch at a
step is a fixed slice of it (``minibatch``), so a run and its serial replay see the same examples. The
labels are a fixed function of the inputs plus noise (a class template for images, a linear map for
features, the count of a marker token for sequences), so a model's training loss falls within a few
dozen steps, which is what a test needs to see that training works through the parameter server.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Dataset = Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]
CLASSES = 10


def images(seed: int, examples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """3x32x32 images: each class has a random template; an example is its class's template plus noise."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(CLASSES, 3, 32, 32, generator=g)
    y = torch.randint(0, CLASSES, (examples,), generator=g)
    x = templates[y] + 1.5 * torch.randn(examples, 3, 32, 32, generator=g)
    return x, y


def features(seed: int, examples: int, width: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """``width`` Gaussian features; the label is the argmax of a random linear map plus noise."""
    g = torch.Generator().manual_seed(seed)
    truth = torch.randn(width, CLASSES, generator=g)
    x = torch.randn(examples, width, generator=g)
    y = torch.argmax(x @ truth + 0.5 * torch.randn(examples, CLASSES, generator=g), 1)
    return x, y


def tokens(seed: int, examples: int, length: int = 16, vocab: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences; the label is how often token 1 occurs (capped at 9), which an LSTM can count."""
    g = torch.Generator().manual_seed(seed)
    rate = torch.rand(examples, 1, generator=g) * 0.5
    marks = torch.rand(examples, length, generator=g) < rate
    x = torch.where(marks, 1, torch.randint(2, vocab, (examples, length), generator=g))
    y = marks.sum(1).clamp(max=CLASSES - 1)
    return x, y


DATASETS: dict[str, Dataset] = {"images": images, "features": features, "tokens": tokens}


def minibatch(x: torch.Tensor, y: torch.Tensor, worker: int, workers: int, step: int, batch: int):
    """Worker ``worker``'s minibatch at ``step``: the data set read in order, each step's global batch of
    ``workers x batch`` examples split by worker, wrapping around at the end."""
    n = len(y)
    start = (step * workers + worker) * batch
    idx = torch.arange(start, start + batch, device=x.device) % n
    return x[idx], y[idx]
