"""A ResNet (18 or 50 layers) on CIFAR-10-shaped data, written against clustertwin's job API.

Run it alone (it trains all its steps, and resumes from --checkpoint when one is there)::

    python examples/resnet_cifar.py --steps 20
    python examples/resnet_cifar.py --steps 20 --depth 50 --width 64     # ResNet-50's size (23.5M weights)
    torchrun --nproc-per-node 2 examples/resnet_cifar.py --steps 20      # two ranks

or let a real run's scheduler run it in leases (scenarios/gavel-own-jobs-cpu.yaml): the agent that starts it
says in its environment how long it may train, where its checkpoint lives, whom to report to and on which
device (``clustertwin.runtime.job.device``: a GPU when its worker type has one; run alone, a GPU when the
machine has one).

The model is ResNet's shape for 32x32 images (a 3x3 stem, four stages, pooling, a linear head): ``--depth
18`` stacks 2, 2, 2, 2 basic blocks, ``--depth 50`` 3, 4, 6, 3 bottleneck blocks of 4x expansion, at a width
small enough for a CPU (``--width 64`` is the paper's). ``--torchvision`` takes torchvision's own
``resnet18``/``resnet50`` instead where torchvision is installed. The data is synthetic: a pure function of
(seed, step, rank), so a job resumed at step k sees the batches it would have seen without the interruption.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from clustertwin.runtime.job import Job, device
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


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, channels_in: int, channels: int, stride: int) -> None:
        super().__init__()
        out = channels * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(channels_in, channels, 1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, stride, 1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, out, 1, bias=False), nn.BatchNorm2d(out),
        )  # fmt: skip
        self.shortcut = nn.Sequential()
        if stride != 1 or channels_in != out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels_in, out, 1, stride, bias=False), nn.BatchNorm2d(out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


# Blocks per stage and block type of each depth, as in "Deep Residual Learning for Image Recognition".
DEPTHS = {18: ((2, 2, 2, 2), BasicBlock, 1), 50: ((3, 4, 6, 3), Bottleneck, 4)}


class ResNet(nn.Module):
    def __init__(self, width: int = 16, classes: int = 10, depth: int = 18) -> None:
        super().__init__()
        counts, block_type, expansion = DEPTHS[depth]
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        blocks, channels = [], width
        for stage, (mult, count) in enumerate(zip((1, 2, 4, 8), counts, strict=True)):
            for block in range(count):
                stride = 2 if stage > 0 and block == 0 else 1
                blocks.append(block_type(channels, width * mult, stride))
                channels = width * mult * expansion
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
    parser.add_argument("--depth", type=int, choices=sorted(DEPTHS), default=18)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", help="resume from and save to this file when run alone")
    parser.add_argument(
        "--torchvision", action="store_true", help="torchvision's resnet of that depth instead"
    )
    args = parser.parse_args()

    torch.set_flush_denormal(True)  # on CPUs, subnormal momentum would slow the steps as training goes on
    where = device()
    if where.type == "cuda":
        torch.cuda.set_device(where)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("nccl" if where.type == "cuda" else "gloo")
    torch.manual_seed(args.seed)
    if args.torchvision:
        import torchvision.models

        model: nn.Module = getattr(torchvision.models, f"resnet{args.depth}")(num_classes=10)
    else:
        model = ResNet(args.width, depth=args.depth)
    model.to(where)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    trained = model
    if distributed:
        ids = [where.index] if where.type == "cuda" else None
        trained = nn.parallel.DistributedDataParallel(model, device_ids=ids)

    job = Job(args.steps, {"model": model, "optimizer": optimizer}, checkpoint=args.checkpoint)
    for step in job:
        inputs, targets = (t.to(where) for t in batch(args.seed, step, job.rank, args.batch_size))
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
