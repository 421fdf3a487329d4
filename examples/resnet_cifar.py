"""A ResNet-18 on CIFAR-10-shaped data, written against clustertwin's job API.

Run it alone (it trains all its steps, and resumes from --checkpoint when one is there)::

    python examples/resnet_cifar.py --steps 20
    torchrun --nproc-per-node 2 examples/resnet_cifar.py --steps 20      # two gloo ranks

or let a real run's scheduler run it in leases (scenarios/gavel-own-jobs-cpu.yaml): the agent that starts it
says in its environment how long it may train, where its checkpoint lives and whom to report to.

The model is ResNet-18's shape (a 3x3 stem, four stages of two basic blocks, pooling, a linear head) at a
width small enough for a CPU (``--width 64`` is the paper's). ``--torchvision`` takes torchvision's own
``resnet18`` instead where torchvision is installed. The data is synthetic: a pure function of (seed,
step, rank), so a job resumed at step k sees the batches it would have seen without the interruption.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from clustertwin.runtime.job import Job
from torch import nn
from torch.nn import functional as F


class BasicBlock(nn.Module):
    def __init__(self, channels_in: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Sequential()
        if stride != 1 or channels_in != channels:
            self.shortcut = nn.Sequential(nn.Conv2d(channels_in, channels, 1, stride, bias=False),
                                          nn.BatchNorm2d(channels))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        blocks, channels = [], width
        for stage, mult in enumerate((1, 2, 4, 8)):
            for block in range(2):
                stride = 2 if stage > 0 and block == 0 else 1
                blocks.append(BasicBlock(channels, width * mult, stride))
                channels = width * mult
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


def batch(seed: int, step: int, rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 64 + rank)
    return torch.randn(size, 3, 32, 32, generator=g), torch.randint(0, 10, (size,), generator=g)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="total training steps")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", help="resume from and save to this file when run alone")
    parser.add_argument("--torchvision", action="store_true", help="torchvision's resnet18 instead")
    args = parser.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    if args.torchvision:
        from torchvision.models import resnet18

        model: nn.Module = resnet18(num_classes=10)
    else:
        model = ResNet18(args.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    trained = nn.parallel.DistributedDataParallel(model) if distributed else model

    job = Job(args.steps, {"model": model, "optimizer": optimizer}, checkpoint=args.checkpoint)
    for step in job:
        inputs, targets = batch(args.seed, step, job.rank, args.batch_size)
        loss = F.cross_entropy(trained(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    if job.rank == 0 and job.leases:
        last = job.leases[-1]
        rate = f"{last.throughput:.2f} steps/s"
        print(f"steps {last.start_step}-{last.end_step} at {rate}; loss {loss.item():.3f}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
