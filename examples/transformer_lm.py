"""A small Transformer language model (decoder-only, causal), written against clustertwin's job API.

    python examples/transformer_lm.py --steps 20
    torchrun --nproc-per-node 2 examples/transformer_lm.py --steps 20

Run alone it trains all its steps (resuming from --checkpoint when one is there); started by a real
run's agent it trains in the leases the scheduler gives (scenarios/gavel-own-jobs-cpu.yaml), on its worker
type's device (``clustertwin.runtime.job.device``; run alone, a GPU when the machine has one). Tokens are
synthetic: a pure function of (seed, step, rank), so a resumed job sees the batches it would have seen.
The learning-rate schedule is part of the checkpoint, as any state the loop keeps must be.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from clustertwin.runtime.job import Job, device
from torch import nn
from torch.nn import functional as F


class TransformerLM(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, context: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.zeros(context, dim))
        layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, vocab)
        self.register_buffer(
            "mask", nn.Transformer.generate_square_subsequent_mask(context), persistent=False
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.embed(tokens) + self.position[:n]
        return self.out(self.norm(self.layers(x, mask=self.mask[:n, :n], is_causal=True)))


def batch(seed: int, step: int, rank: int, size: int, context: int, vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 64 + rank)
    return torch.randint(0, vocab, (size, context + 1), generator=g)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="total training steps")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
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
    model = TransformerLM(args.vocab, args.dim, args.layers, args.heads, args.context).to(where)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 50))
    trained = model
    if distributed:
        ids = [where.index] if where.type == "cuda" else None
        trained = nn.parallel.DistributedDataParallel(model, device_ids=ids)

    state = {"model": model, "optimizer": optimizer, "schedule": schedule}
    job = Job(args.steps, state, checkpoint=args.checkpoint)
    for step in job:
        tokens = batch(args.seed, step, job.rank, args.batch_size, args.context, args.vocab).to(where)
        logits = trained(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    if job.rank == 0 and job.leases:
        last = job.leases[-1]
        rate = f"{last.throughput:.2f} steps/s"
        print(f"steps {last.start_step}-{last.end_step} at {rate}; loss {loss.item():.3f}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
