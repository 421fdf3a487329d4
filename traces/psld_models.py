"""Per-tensor parameter shapes and per-layer compute times of the image models PSLD is evaluated on.

Built from the bundled PipeDream profiles (``traces/data/pipedream``, see its PROVENANCE.md): each
profiled layer with parameters is split into the learnable tensors a framework would create for it
(Conv2d/Linear: weight, plus a bias unless ``bias=False``; BatchNorm2d: gamma and beta), in the
profile's topological order. Sizes are fp32 bytes. ResNet-101 comes out at 44.5 M parameters, the paper's
number ([PSLD], §2.2); VGG-16's fc6 weight is 25088 x 4096 x 4 B = 411 MB (">400 MB", Fig. 2).

Compute times are the profile's forward/backward milliseconds scaled linearly to the per-GPU batch size
(the paper's 32 / 32 / 64 for AlexNet / ResNet-50 / VGG-16, §6.1) and by ``compute_scale`` (the
profiles' GPU is not recorded; the paper used GTX 1080Ti).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clustertwin.policies.psld.blocks import Tensor
from clustertwin.traces.pipedream_profile import bundled_profile

from clustertwin.errors import InputError

PSLD_MODELS = ("alexnet", "vgg16", "resnet18", "resnet50", "resnet101")
PAPER_BATCH = {"alexnet": 32, "resnet50": 32, "vgg16": 64, "resnet101": 32, "resnet18": 32}

_OUT_CONV = re.compile(r"^Conv2d\(\s*\d+,\s*(\d+)")
_OUT_LINEAR = re.compile(r"out_features=(\d+)")


@dataclass(frozen=True)
class PSModel:
    """Tensors (``layer`` = index into the per-layer times) and compute times for one minibatch."""

    name: str
    tensors: tuple[Tensor, ...]
    forward_s: tuple[float, ...]  # per layer, in the profile's order
    backward_s: tuple[float, ...]
    batch_size: int

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def params(self) -> float:
        return self.nbytes / 4


def _split(description: str, nbytes: int) -> list[tuple[str, int]]:
    kind = description.split("(", 1)[0]
    if kind in ("Conv2d", "Linear"):
        match = (_OUT_CONV if kind == "Conv2d" else _OUT_LINEAR).search(description)
        if match and "bias=False" not in description:
            bias = int(match.group(1)) * 4
            if 0 < bias < nbytes:
                return [("weight", nbytes - bias), ("bias", bias)]
        return [("weight", nbytes)]
    if kind.startswith("BatchNorm") and nbytes % 8 == 0:
        return [("gamma", nbytes // 2), ("beta", nbytes // 2)]
    return [("param", nbytes)]


def psld_model(name: str, batch_size: int | None = None, compute_scale: float = 1.0) -> PSModel:
    """The model ``name`` (one of ``PSLD_MODELS``) at ``batch_size`` (default: the paper's)."""
    if name not in PSLD_MODELS:
        raise InputError("model", f"unknown model {name!r}; known: {', '.join(PSLD_MODELS)}")
    profile = bundled_profile(name)
    batch = batch_size or PAPER_BATCH[name]
    k = batch / profile.batch_size * compute_scale
    tensors: list[Tensor] = []
    for index, layer in enumerate(profile.layers):
        nbytes = round(layer.parameter_bytes)
        if nbytes <= 0:
            continue
        for part, size in _split(layer.description, nbytes):
            tensors.append(Tensor(f"{layer.name}.{part}", size, index))
    return PSModel(
        name,
        tuple(tensors),
        tuple(lay.forward_s * k for lay in profile.layers),
        tuple(lay.backward_s * k for lay in profile.layers),
        batch,
    )
