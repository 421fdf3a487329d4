"""A small convolutional network for ``channels x side x side`` images: two 3x3 convolutions with ReLU
and 2x2 max-pooling, then a linear classifier. Small enough for CPU tests, real enough to exercise
convolution gradients through a parameter server."""

from __future__ import annotations

from torch import nn


def cnn(input_shape: tuple[int, ...], classes: int, hidden: int = 8) -> nn.Module:
    """The CNN for inputs of ``input_shape`` = (channels, side, side); ``hidden`` channels per layer."""
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(channels, hidden, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(hidden, hidden, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(hidden * (height // 4) * (width // 4), classes),
    )
