"""Small real training jobs from Gavel's job families ([Narayanan] Table 5.2), runnable on CPU and GPU.

Gavel's traces name ResNet, LSTM/Transformer language models, a recommendation autoencoder, A3C and
CycleGAN. The runtime trains a small member of each family instead: an image classifier (a ResNet-18-like
network on CIFAR-shaped inputs), a language model (an LSTM on token sequences) and a recommendation
autoencoder (an MLP over item vectors, like Recoder). Data is synthetic and a pure function of
(seed, step, rank), so a job that resumes from a checkpoint at step k sees exactly the batches it would
have seen without the interruption.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from clustertwin.runtime.models.nets import BasicBlock
from torch import nn
from torch.nn import functional as F


class SmallResNet(nn.Module):
    """ResNet-18's shape (stem, four stages of basic blocks, pooling) at a fraction of its width."""

    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        stages, channels = [], width
        for i, mult in enumerate((1, 2, 4, 8)):
            stages.append(BasicBlock(channels, width * mult, 1 if i == 0 else 2))
            channels = width * mult
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1).flatten(1))


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab: int = 1000, embed: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.lstm(self.embed(tokens))[0])


class RecommendationAutoencoder(nn.Module):
    def __init__(self, items: int = 2000, hidden: int = 256, code: int = 64) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(items, hidden), nn.ReLU(), nn.Linear(hidden, code), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(code, hidden), nn.ReLU(), nn.Linear(hidden, items))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Workload:
    """One job family at one batch size: its model, its synthetic batches and its loss."""

    family: str  # image | language | recommendation
    batch_size: int

    def model(self) -> nn.Module:
        return {
            "image": SmallResNet,
            "language": LSTMLanguageModel,
            "recommendation": RecommendationAutoencoder,
        }[self.family]()

    def batch(self, seed: int, step: int, rank: int = 0) -> Batch:
        """The batch of ``step`` on ``rank``: a pure function of its arguments, generated on the CPU."""
        g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 64 + rank)
        b = self.batch_size
        if self.family == "image":
            return torch.randn(b, 3, 32, 32, generator=g), torch.randint(0, 10, (b,), generator=g)
        if self.family == "language":
            tokens = torch.randint(0, 1000, (b, 33), generator=g)
            return tokens[:, :-1], tokens[:, 1:]
        ratings = (torch.rand(b, 2000, generator=g) < 0.02).float()
        return ratings, ratings

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        inputs, targets = batch
        out = model(inputs)
        if self.family == "image":
            return F.cross_entropy(out, targets)
        if self.family == "language":
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1))
        return F.binary_cross_entropy_with_logits(out, targets)

    def optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        # Momentum gives the optimizer state that a resume must restore exactly.
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


# Gavel job types by model name (the part before " (batch size N)"): the family that stands in for it.
_FAMILIES: dict[str, str] = {
    "ResNet-18": "image",
    "ResNet-50": "image",
    "CycleGAN": "image",
    "A3C": "image",
    "LM": "language",
    "Transformer": "language",
    "Recommendation": "recommendation",
}
# Batch sizes of the small stand-ins: Gavel's are sized for V100s; ours must train on a laptop CPU.
_BATCH: dict[str, int] = {"image": 32, "language": 16, "recommendation": 64}


def workload_for(job_type: str) -> Workload:
    """The small stand-in for a Gavel job type, e.g. ``"ResNet-18 (batch size 64)"`` -> image."""
    model = job_type.split(" (")[0]
    family = _FAMILIES.get(model)
    if family is None:
        raise KeyError(f"no runtime workload for job type {job_type!r}; known models: {', '.join(_FAMILIES)}")
    return Workload(family, _BATCH[family])
