"""Small built-in networks for real runs, in plain torch (torchvision is not a dependency).

Each builder takes keyword options so a scenario can size it, and returns a ``torch.nn.Module`` whose
``forward(x)`` gives class logits; the inputs each one expects are named by its default data set
(``runtime.models.data``). They are deliberately small: a real run on a 2-core CPU host trains them in
seconds, while their tensors keep the shapes that matter to a parameter server (many small BN/bias
tensors beside a few large weights, and one dominant fully connected weight in the VGG-like net).
"""

from __future__ import annotations

import torch
from torch import nn


class MLR(nn.Module):
    """Multinomial logistic regression: one linear map from features to class logits."""

    def __init__(self, features: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.linear = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class BasicBlock(nn.Module):
    """A basic residual block (two 3x3 convolutions with batch norm), with a 1x1 projection when the
    shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Sequential()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNetSmall(nn.Module):
    """A ResNet for 32x32 images: a stem, ``len(widths)`` stages of ``depth`` residual blocks (each stage
    after the first halves the resolution), global average pooling and a linear classifier."""

    def __init__(self, widths: tuple[int, ...] = (8, 16, 32), depth: int = 1, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]))
        layers, cin = [], widths[0]
        for i, cout in enumerate(widths):
            for j in range(depth):
                layers.append(BasicBlock(cin, cout, 2 if i > 0 and j == 0 else 1))
                cin = cout
        self.stages = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stages(torch.relu(self.stem(x)))
        return self.fc(y.mean(dim=(2, 3)))


class VGGSmall(nn.Module):
    """A VGG-like network for 32x32 images: 3x3 convolution pairs with max pooling, then two fully
    connected layers whose first weight dominates the model's bytes, as VGG-16's fc6 does."""

    def __init__(self, widths: tuple[int, ...] = (16, 32, 64), hidden: int = 256, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for cout in widths:
            layers += [nn.Conv2d(cin, cout, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2)]
            cin = cout
        self.features = nn.Sequential(*layers)
        side = 32 // 2 ** len(widths)
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(cin * side * side, hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class LSTMSmall(nn.Module):
    """A sequence classifier: token embedding, an LSTM, and a linear map of the last hidden state."""

    def __init__(
        self, vocab: int = 64, embed: int = 32, hidden: int = 64, layers: int = 1, classes: int = 10
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(x))
        return self.fc(out[:, -1])
