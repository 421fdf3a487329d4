"""A click-through recommendation model (user and item embeddings, an MLP over them), written against
clustertwin's job API.

    python examples/recommendation.py --steps 20
    torchrun --nproc-per-node 2 examples/recommendation.py --steps 20

The model scores a (user, item) pair from the two embeddings, their product and an MLP, the shape of neural
collaborative filtering; its embedding tables make its steps memory-bound on a CPU, as those of Gavel's
Recommendation jobs (an autoencoder over ML-20M, batch sizes 512 to 8192; [Gavel] Table 5.2) are. The clicks
are synthetic: a hidden low-rank preference model, fixed by ``--seed``, says whether a user clicks an item,
and each step's (user, item) pairs are a pure function of (seed, step, rank), so a resumed job sees the
batches it would have seen. Run alone it trains all its steps (resuming from --checkpoint when one is there);
started by a real run's agent it trains in the leases the scheduler gives, on its worker type's device
(``clustertwin.runtime.job.device``; run alone, a GPU when the machine has one).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from clustertwin.runtime.job import Job, device
from torch import nn
from torch.nn import functional as F

HIDDEN_RANK = 8  # rank of the preference model that makes the clicks


class Recommender(nn.Module):
    def __init__(self, users: int, items: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.users = nn.Embedding(users, dim)
        self.items = nn.Embedding(items, dim)
        self.mlp = nn.Sequential(
            nn.Linear(3 * dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, 1),
        )  # fmt: skip

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        u, v = self.users(users), self.items(items)
        return self.mlp(torch.cat([u, v, u * v], dim=1)).squeeze(1)


class Clicks:
    """Who clicks what: user u clicks item i when their hidden preference vectors agree (a positive dot
    product), a structure the model can learn."""

    def __init__(self, seed: int, users: int, items: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.user_taste = torch.randn(users, HIDDEN_RANK, generator=g)
        self.item_traits = torch.randn(items, HIDDEN_RANK, generator=g)

    def batch(self, seed: int, step: int, rank: int, size: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 64 + rank)
        users = torch.randint(0, len(self.user_taste), (size,), generator=g)
        items = torch.randint(0, len(self.item_traits), (size,), generator=g)
        clicked = (self.user_taste[users] * self.item_traits[items]).sum(1) > 0
        return users, items, clicked.float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="total training steps")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=64, help="embedding size")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", help="resume from and save to this file when run alone")
    args = parser.parse_args()

    torch.set_flush_denormal(True)  # on CPUs, subnormal optimizer state would slow the steps over time
    where = device()
    if where.type == "cuda":
        torch.cuda.set_device(where)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("nccl" if where.type == "cuda" else "gloo")
    torch.manual_seed(args.seed)
    model = Recommender(args.users, args.items, args.dim, args.hidden).to(where)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    trained = model
    if distributed:
        ids = [where.index] if where.type == "cuda" else None
        trained = nn.parallel.DistributedDataParallel(model, device_ids=ids)

    clicks = Clicks(args.seed, args.users, args.items)
    job = Job(args.steps, {"model": model, "optimizer": optimizer}, checkpoint=args.checkpoint)
    for step in job:
        users, items, clicked = (
            t.to(where) for t in clicks.batch(args.seed, step, job.rank, args.batch_size)
        )
        loss = F.binary_cross_entropy_with_logits(trained(users, items), clicked)
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
