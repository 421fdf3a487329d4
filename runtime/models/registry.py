"""Models for real runs: the built-in networks by name, or the user's own as ``module:function``.

``REAL_MODELS`` is the registry of built-ins (``clustertwin list`` prints it); each entry builds a
``ModelSpec``: the network and the synthetic data set it trains on by default. A user's model is
``package.module:function``, a function of no arguments that returns a ``torch.nn.Module``; its data set
must then be named too (a built-in name of ``runtime.models.data.DATASETS`` or ``module:function``
returning ``(x, y)`` given ``(seed, examples)``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from clustertwin.policies.registry import Registry, UnknownName
from clustertwin.runtime.models import nets
from clustertwin.runtime.models.data import DATASETS, Dataset
from torch import nn

from clustertwin.errors import InputError


@dataclass(frozen=True)
class ModelSpec:
    """A network builder and the name of its default data set."""

    build: Callable[[], nn.Module]
    data: str | None


REAL_MODELS: Registry[Callable[[], ModelSpec]] = Registry(
    "real models", "torch models a real parameter-server run trains (or module:function)", noun="model"
)


@REAL_MODELS.register("mlr")
def _mlr() -> ModelSpec:
    """Multinomial logistic regression on 64 synthetic features, 10 classes."""
    return ModelSpec(nets.MLR, "features")


@REAL_MODELS.register("resnet_small")
def _resnet_small() -> ModelSpec:
    """A 3-stage ResNet (8/16/32 channels) on synthetic 32x32 images."""
    return ModelSpec(nets.ResNetSmall, "images")


@REAL_MODELS.register("resnet18")
def _resnet18() -> ModelSpec:
    """ResNet-18 for 32x32 images (64-512 channels, 2 blocks per stage, a 3x3 stem): 11.2M parameters
    in 62 tensors, the shape of [PSLD]'s ResNet-18 workload; for GPU workers."""
    return ModelSpec(lambda: nets.ResNetSmall(widths=(64, 128, 256, 512), depth=2), "images")


@REAL_MODELS.register("vgg_small")
def _vgg_small() -> ModelSpec:
    """A VGG-like net (3 conv stages, 2 fully connected layers) on synthetic 32x32 images."""
    return ModelSpec(nets.VGGSmall, "images")


@REAL_MODELS.register("lstm_small")
def _lstm_small() -> ModelSpec:
    """An embedding + 1-layer LSTM sequence classifier on synthetic token sequences."""
    return ModelSpec(nets.LSTMSmall, "tokens")


def _entry_point(name: str, field: str) -> Callable:
    module, _, function = name.partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        raise InputError(field, f"cannot load {name!r} ({exc}); is its module on PYTHONPATH?") from exc


def model_spec(name: str, data: str | None = None, field: str = "real.model") -> ModelSpec:
    """The model ``name`` (a built-in or ``module:function``) with data set ``data`` (default: the
    built-in's own)."""
    if ":" in name:
        spec = ModelSpec(_entry_point(name, field), None)
    else:
        try:
            spec = REAL_MODELS.get(name)()
        except UnknownName as exc:
            raise InputError(field, str(exc)) from exc
    data = data or spec.data
    if data is None:
        raise InputError(field.rsplit(".", 1)[0] + ".data", f"model {name!r} needs a data set; name one")
    return ModelSpec(spec.build, data)


def dataset(name: str, field: str = "real.data") -> Dataset:
    """The data set ``name``: a built-in of ``DATASETS`` or ``module:function``."""
    if ":" in name:
        return _entry_point(name, field)
    if name not in DATASETS:
        raise InputError(field, f"unknown data set {name!r}; known: {', '.join(DATASETS)} or module:function")
    return DATASETS[name]


def build(name: str, data: str | None = None) -> tuple[nn.Module, Dataset]:
    """The network and data set of a scenario's ``real.model``/``real.data``; checks that the network
    is a module with parameters."""
    spec = model_spec(name, data)
    net = spec.build()
    if not isinstance(net, nn.Module) or not any(True for _ in net.parameters()):
        raise InputError("real.model", f"{name!r} must return a torch.nn.Module with parameters")
    return net, dataset(spec.data or "")
