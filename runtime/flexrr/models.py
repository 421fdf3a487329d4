"""What a real FlexRR run trains: a model and a data set, each named in the scenario (``real.model``,
``real.data``) by a registry entry or by a user's ``module:function``.

* A **model** factory is ``factory(input_shape, classes, hidden) -> torch.nn.Module`` (``hidden``: the
  width knob, ``real.hidden``). Its parameters are initialised under ``torch.manual_seed(seed)``, so every
  process builds the same initial model.
* A **data** loader is ``loader(seed, examples, features, classes, dtype, device) -> (x, y)``: ``x`` has
  ``examples`` rows (of any shape after the first axis: the model's ``input_shape``), ``y`` the class
  labels (int64). It must be a pure function of its arguments (every process calls it).

``clustertwin list`` shows both families once this module is imported.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

import torch
from clustertwin.policies.registry import Registry
from clustertwin.runtime.models import cnn, mlp, mlr
from torch import nn

ModelFactory = Callable[[tuple[int, ...], int, int], nn.Module]
DataLoader = Callable[..., tuple[torch.Tensor, torch.Tensor]]

MODELS: Registry[ModelFactory] = Registry(
    "flexrr models", "torch models a real FlexRR run trains (real.model)", noun="model"
)
DATA: Registry[DataLoader] = Registry(
    "flexrr data", "data sets a real FlexRR run trains on (real.data)", noun="data set"
)


@MODELS.register("mlr")
def _mlr(input_shape: tuple[int, ...], classes: int, hidden: int) -> nn.Module:
    """Multinomial logistic regression, weights from zero (FlexRR's MLR benchmark, §3.4)."""
    net = nn.Linear(math.prod(input_shape), classes, bias=False)
    nn.init.zeros_(net.weight)
    return net


MODELS.register("mlp", "A two-hidden-layer tanh perceptron (runtime/models/mlp.py)")(mlp.mlp)
MODELS.register("cnn", "A two-convolution network for small images (runtime/models/cnn.py)")(cnn.cnn)


@DATA.register("synthetic")
def _synthetic(
    seed: int, examples: int, features: int, classes: int, dtype: torch.dtype, device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Vectors of ``features`` labelled by the argmax of a random linear map plus noise."""
    return mlr.synthetic_data(seed, examples, features, classes, dtype, device)


@DATA.register("synthetic_images")
def _synthetic_images(
    seed: int, examples: int, features: int, classes: int, dtype: torch.dtype, device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """One-channel square images of ``features`` pixels (a square of a multiple of 4): a class's
    random template plus unit noise."""
    side = math.isqrt(features)
    if side * side != features or side % 4:
        raise ValueError(
            f"synthetic_images needs real.features = a square of a multiple of 4, got {features}"
        )
    g = torch.Generator(device=device).manual_seed(seed)
    kw = {"generator": g, "dtype": dtype, "device": device}
    templates = torch.randn(classes, 1, side, side, **kw)
    y = torch.randint(0, classes, (examples,), generator=g, device=device)
    x = templates[y] + torch.randn(examples, 1, side, side, **kw)
    return x, y


def resolve(registry: Registry[Any], name: str) -> Any:
    """A registry entry, or the ``module:function`` a user named (imported)."""
    if ":" not in name:
        return registry.get(name)
    module, _, attr = name.partition(":")
    try:
        target = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise KeyError(f"cannot import {name!r}: {err}") from None
    if not callable(target):
        raise KeyError(f"{name!r} is not callable")
    return target
