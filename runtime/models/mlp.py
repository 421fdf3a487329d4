"""A small multi-layer perceptron: ``features -> hidden -> hidden -> classes`` with tanh activations.

A non-convex stand-in for the papers' neural workloads that still trains in seconds on a CPU core.
"""

from __future__ import annotations

from torch import nn


def mlp(input_shape: tuple[int, ...], classes: int, hidden: int = 32) -> nn.Module:
    """The MLP for flat inputs of ``input_shape`` (one dimension)."""
    (features,) = input_shape
    return nn.Sequential(
        nn.Linear(features, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, classes),
    )
