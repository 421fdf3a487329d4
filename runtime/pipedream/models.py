"""Models for ``--backend real`` runs of ``kind: pipedream``: small configurable torch definitions of the
papers' model families, or the user's own.

A model is a chain of layers (PipeDream's profiler and planner work on a chain, [Narayanan] §2.4.1): the
built-in ``gpt`` (``runtime.pipedream.gpt``: embedding, transformer blocks, head), ``vgg`` (3x3
convolutions with ReLU, max-pooling between blocks, a fully connected classifier), ``resnet`` (a stem,
residual basic blocks of two 3x3 convolutions, each block one layer so the skip stays inside it, pooling
and a classifier) and ``gnmt`` (an embedding, stacked LSTMs, residual from the third on as in GNMT, and
a projection to the vocabulary). Sizes are options (``real.options`` of the scenario); the defaults are
CPU-sized. A user's model is ``module:function``: ``function(**options)`` returns an ``nn.Sequential``
or a list of layers; its input is ``real.input_shape`` per sample (``real.input_dtype``; int64 inputs
are token ids below ``real.vocab``).

Every model is trained on synthetic data with cross-entropy over its output's last dimension, targets
drawn uniformly; a layer's weights depend only on the seed and its index (built-in) or on the seed
(user's: the whole list is built, then cut), never on how the chain is cut into stages.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

BUILTIN = ("gpt", "vgg", "resnet", "gnmt")
Options = dict[str, object]


def _int(options: Options, name: str, default: int) -> int:
    return int(options.get(name, default))  # type: ignore[call-overload]


def _ints(options: Options, name: str, default: Sequence[int]) -> list[int]:
    return [int(v) for v in options.get(name, default)]  # type: ignore[union-attr]


class _Last(nn.Module):
    """The output of a recurrent layer without its state (an LSTM returns a tuple)."""

    def __init__(self, lstm: nn.LSTM, residual: bool) -> None:
        super().__init__()
        self.lstm, self.residual = lstm, residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lstm(x)[0]
        return x + y if self.residual else y


class _BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convolutions with batch-free ReLU and an identity (or 1x1) skip."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.a = nn.Conv2d(cin, cout, 3, stride, 1)
        self.b = nn.Conv2d(cout, cout, 3, 1, 1)
        self.skip = nn.Conv2d(cin, cout, 1, stride) if (cin, stride) != (cout, 1) else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.skip(x) + self.b(F.relu(self.a(x))))


def _vgg(options: Options) -> tuple[list[Callable[[], nn.Module]], tuple[int, ...]]:
    channels = _ints(options, "channels", (16, 32, 64))
    convs = _int(options, "convs_per_block", 2)
    image = _int(options, "image", 32)
    classes = _int(options, "classes", 10)
    hidden = _int(options, "hidden", 128)
    fc_layers = _int(options, "fc_layers", 1)  # hidden fully connected layers (VGG has 2 of 4096)
    makers: list[Callable[[], nn.Module]] = []
    cin, size = 3, image
    for cout in channels:
        for j in range(convs):
            a = cin if j == 0 else cout
            makers.append(lambda a=a, b=cout: nn.Sequential(nn.Conv2d(a, b, 3, 1, 1), nn.ReLU()))
        makers.append(lambda: nn.MaxPool2d(2))
        cin, size = cout, size // 2
    flat = cin * size * size
    makers.append(lambda: nn.Sequential(nn.Flatten(), nn.Linear(flat, hidden), nn.ReLU()))
    for _ in range(fc_layers - 1):
        makers.append(lambda: nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU()))
    makers.append(lambda: nn.Linear(hidden, classes))
    return makers, (3, image, image)


def _resnet(options: Options) -> tuple[list[Callable[[], nn.Module]], tuple[int, ...]]:
    channels = _ints(options, "channels", (16, 32, 64))
    blocks = _int(options, "blocks_per_stage", 2)
    image = _int(options, "image", 32)
    classes = _int(options, "classes", 10)
    makers: list[Callable[[], nn.Module]] = [
        lambda: nn.Sequential(nn.Conv2d(3, channels[0], 3, 1, 1), nn.ReLU())
    ]
    cin = channels[0]
    for i, cout in enumerate(channels):
        for j in range(blocks):
            stride = 2 if i > 0 and j == 0 else 1
            makers.append(lambda a=cin, b=cout, s=stride: _BasicBlock(a, b, s))
            cin = cout
    makers.append(lambda: nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)))
    return makers, (3, image, image)


def _gnmt(options: Options) -> tuple[list[Callable[[], nn.Module]], tuple[int, ...]]:
    vocab = _int(options, "vocab", 512)
    hidden = _int(options, "hidden", 64)
    layers = _int(options, "layers", 4)
    seq = _int(options, "seq", 16)
    makers: list[Callable[[], nn.Module]] = [lambda: nn.Embedding(vocab, hidden)]
    for i in range(layers):
        makers.append(lambda r=i >= 2: _Last(nn.LSTM(hidden, hidden, batch_first=True), r))
    makers.append(lambda: nn.Linear(hidden, vocab))
    return makers, (seq,)


def _gpt(options: Options) -> tuple[list[Callable[[], nn.Module]], tuple[int, ...]]:
    from clustertwin.runtime.pipedream.gpt import GPTConfig, build_layer

    fields = {k: options[k] for k in ("vocab", "hidden", "heads", "layers", "seq", "amp") if k in options}
    defaults = {"vocab": 256, "hidden": 64, "heads": 4, "layers": 4, "seq": 32, "amp": False}
    config = GPTConfig(**{**defaults, **fields})  # type: ignore[arg-type]
    makers = [lambda i=i: build_layer(config, 0, i, "cpu") for i in range(config.layers + 2)]
    return makers, (config.seq,)


BUILDERS: dict[str, Callable[[Options], tuple[list[Callable[[], nn.Module]], tuple[int, ...]]]] = {
    "gpt": _gpt,
    "vgg": _vgg,
    "resnet": _resnet,
    "gnmt": _gnmt,
}
TOKEN_MODELS = {"gpt": "vocab", "gnmt": "vocab"}  # input ids below this option (default in the builder)
TOKEN_DEFAULTS = {"gpt": 256, "gnmt": 512}


@dataclass(frozen=True)
class ModelSource:
    """Where a real run's layers come from, and its synthetic input (picklable: sent to every rank).

    ``model``: a built-in name or ``module:function``; ``input_shape`` per sample; ``vocab`` > 0: the
    input is int64 token ids below it, else float32 normal noise."""

    model: str
    options: dict = field(default_factory=dict)
    seed: int = 0
    input_shape: tuple[int, ...] = ()
    vocab: int = 0

    @staticmethod
    def of(
        model: str, options: Options, seed: int, input_shape: Sequence[int] | None, vocab: int
    ) -> ModelSource:
        """The source of a scenario's ``real`` section: built-ins know their input, a user's model is
        told (``input_shape``, ``vocab``)."""
        if model in BUILDERS:
            _, shape = BUILDERS[model](options)
            tokens = (
                int(options.get(TOKEN_MODELS[model], TOKEN_DEFAULTS[model])) if model in TOKEN_MODELS else 0
            )  # type: ignore[call-overload]
            return ModelSource(model, dict(options), seed, tuple(shape), tokens)
        if input_shape is None:
            raise ValueError(f"model {model!r}: give real.input_shape (per-sample input shape)")
        return ModelSource(model, dict(options), seed, tuple(input_shape), vocab)

    def layers(self, indices: Sequence[int] | None = None) -> list[nn.Module]:
        """The model's layers (those at ``indices``; all by default), on CPU, from the seed."""
        if self.model in BUILDERS:
            makers, _ = BUILDERS[self.model](self.options)
            out = []
            for i in range(len(makers)) if indices is None else indices:
                torch.manual_seed(self.seed * 1_000_003 + i)
                out.append(makers[i]())
            return out
        module, _, name = self.model.partition(":")
        torch.manual_seed(self.seed)
        built = getattr(importlib.import_module(module), name)(**self.options)
        layers = list(built.children()) if isinstance(built, nn.Sequential) else list(built)
        if not layers or not all(isinstance(layer, nn.Module) for layer in layers):
            raise ValueError(f"{self.model} must return an nn.Sequential or a list of nn.Module layers")
        return layers if indices is None else [layers[i] for i in indices]

    def microbatch(
        self, k: int, batch: int, classes_shape: tuple[int, ...], classes: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Input and targets of microbatch ``k`` (CPU): a pure function of the seed and ``k``."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + 7919 * (k + 1))
        if self.vocab:
            x = torch.randint(self.vocab, (batch, *self.input_shape), generator=g)
        else:
            x = torch.randn((batch, *self.input_shape), generator=g)
        y = torch.randint(classes, (batch, *classes_shape), generator=g)
        return x, y


def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the output's last dimension, in fp32."""
    return F.cross_entropy(output.float().flatten(0, -2), target.flatten())


@dataclass(frozen=True)
class SequentialWorkload:
    """A chain of layers cut into the plan's stages, as a ``runtime.pipedream.workload.Workload``.

    ``cuts[i]`` is chunk ``i``'s (first, last) layer; ``shapes[l]`` the shape of layer ``l``'s output
    (whose dtype is ``dtypes[l]``) for one microbatch; the output of the last layer is
    ``(microbatch, *target_shape, classes)``."""

    source: ModelSource
    batch: int
    cuts: tuple[tuple[int, int], ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    seed: int = 0

    @property
    def classes(self) -> int:
        return self.shapes[-1][-1]

    def chunk(self, index: int, chunks: int, device: torch.device) -> nn.Module:
        if chunks != len(self.cuts):
            raise ValueError(f"the workload is cut into {len(self.cuts)} chunks, not {chunks}")
        first, last = self.cuts[index]
        return nn.Sequential(*self.source.layers(range(first, last + 1))).to(device)

    def microbatch(self, k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.source.microbatch(k, self.batch, self.shapes[-1][1:-1], self.classes)
        return x.to(device), y.to(device)

    def boundaries(self, chunks: int) -> list[tuple[tuple[int, ...], torch.dtype]]:
        return [
            (self.shapes[last], getattr(torch, self.dtypes[last].removeprefix("torch.")))
            for _, last in self.cuts[:-1]
        ]

    def boundary(self, chunks: int) -> tuple[tuple[int, ...], torch.dtype]:
        shapes = set(self.boundaries(chunks))
        if len(shapes) != 1:
            raise ValueError("this workload's chunk boundaries differ in shape; use boundaries()")
        return shapes.pop()

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return loss(output, target)


def trace_shapes(
    layers: Sequence[nn.Module], sample: torch.Tensor
) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    """Each layer's output shape and dtype on ``sample`` (one forward without autograd)."""
    shapes, dtypes = [], []
    x = sample
    with torch.no_grad():
        for layer in layers:
            x = layer(x)
            if not isinstance(x, torch.Tensor):
                raise ValueError(f"layer {type(layer).__name__} returns {type(x).__name__}, not one tensor")
            shapes.append(tuple(x.shape))
            dtypes.append(str(x.dtype))
    if len(shapes[-1]) < 2 or math.prod(shapes[-1][1:]) == 0:
        raise ValueError(f"the last layer's output {shapes[-1]} has no class dimension")
    return tuple(shapes), tuple(dtypes)
